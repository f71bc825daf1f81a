// Flow fidelity: a flow graph run on SimGrid's fluid (max-min) model. Worker actors put the transfers into a
// mailbox whose permanent receiver starts them at once; no actor runs on the GPUs themselves.
#include "common/error.hpp"
#include "common/process.hpp"
#include "netsim/netsim.hpp"

#include "common/build.hpp"
#include "netsim/simgrid_platform.hpp"
#include "netsim/slack_links.hpp"

#include <simgrid/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <queue>

namespace spansim::netsim {

namespace sg4 = simgrid::s4u;
using detail::SimgridPlatform;

namespace {

std::string num(double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Most ops a worker actor keeps in flight. Comm::wait_any_for registers with, and at the end unregisters
// from, every comm handed to it, so one controller waiting on n concurrent flows costs O(n) per completion.
constexpr std::size_t kWorkerOps = 64;

// Comms put into one mailbox before the next one takes over (see Outbox).
constexpr std::size_t kMailboxComms = 4096;

/// @brief Where the workers put transfers. SimGrid 3.32 lists every host-to-host comm (Comm::sendto) with
/// maestro and walks that list at each comm's end: O(comms in flight) per flow, most of the time of a 100K-GPU
/// step. Mailbox comms are listed with the actors that wait on them (a worker, at most kWorkerOps). A
/// mailbox's permanent receiver starts each comm as it is put, from the sender's host to the receiver's: the
/// worker moves itself to the source GPU, and one receiver actor, moved to the destination GPU under a lock
/// (a simcall lets other workers run), stands for every GPU. The flows and their rates are those of sendto.
/// A permanent mailbox keeps every comm it carried until cleared, so a new mailbox takes over every
/// kMailboxComms comms and the old one is cleared once all of its comms have ended.
class Outbox {
public:
  explicit Outbox(sg4::Host* home)
  {
    receiver_ = sg4::Actor::create("receiver", home, [] { sg4::Mailbox::by_name("spansim-idle")->get<void>(); });
    receiver_->daemonize();
  }

  /// @brief Starts a transfer of `bytes` from `src` to `dst`; returns the comm and its mailbox number.
  std::pair<sg4::CommPtr, std::size_t> put(sg4::Host* src, sg4::Host* dst, uint64_t bytes, double rate)
  {
    sg4::this_actor::set_host(src);
    lock_->lock();
    if (boxes_.empty() || put_in_last_ == kMailboxComms)
      open_box();
    receiver_->set_host(dst);
    const std::size_t box = boxes_.size() - 1;
    auto comm             = boxes_[box]->put_init(this, bytes);
    if (std::isfinite(rate)) // a window: at most window / round trip
      comm->set_rate(rate);
    comm->start();
    ++open_[box];
    ++put_in_last_;
    lock_->unlock();
    return {std::move(comm), box};
  }

  /// @brief Called once each comm has ended.
  void ended(std::size_t box)
  {
    if (--open_[box] == 0 && box + 1 < boxes_.size())
      boxes_[box]->clear();
  }

private:
  void open_box()
  {
    // Simcalls let other workers run (and end comms) in between: the new mailbox is made ready before it is
    // listed, and the one it replaces is cleared only once it is no longer the last.
    auto* box = sg4::Mailbox::by_name("spansim-transfers-" + std::to_string(boxes_.size()));
    box->set_receiver(receiver_);
    boxes_.push_back(box);
    open_.push_back(0);
    put_in_last_ = 0;
    if (boxes_.size() > 1 && open_[boxes_.size() - 2] == 0)
      boxes_[boxes_.size() - 2]->clear();
  }

  sg4::ActorPtr receiver_;
  sg4::MutexPtr lock_ = sg4::Mutex::create();
  std::vector<sg4::Mailbox*> boxes_;
  std::vector<std::size_t> open_; ///< comms not yet ended, per mailbox
  std::size_t put_in_last_ = 0;
};

/// @brief The state shared by the workers of one simulation. SimGrid runs one actor at a time, so they
/// share it without locks.
struct Schedule {
  const std::vector<Op>& ops;
  const topology::Topology& topology;
  const SimgridPlatform& platform;
  sg4::Host* home; ///< where actors start; workers move to each transfer's source GPU
  std::vector<OpTiming> timing;
  std::vector<int> remaining;        ///< dependencies not yet ended, per op
  std::vector<int> dependents_first; ///< CSR: the dependents of op i are
  std::vector<int> dependents;       ///< dependents[dependents_first[i] .. dependents_first[i + 1])
  std::size_t done      = 0;
  Outbox* outbox        = nullptr;
  double latency_factor = 1; ///< SimgridSettings::latency_factor, applied by the workers' latency timers
};

void spawn_worker(Schedule& s, std::vector<int> initial);

/// @brief Runs a set of ops that became ready, and the ops they make ready in turn, until none is left;
/// ops beyond kWorkerOps in flight go to new workers. Transfers are comms, delays the worker's own timers.
class Worker {
public:
  explicit Worker(Schedule& schedule) : s_(schedule), outbox_(*schedule.outbox) {}

  void run(std::vector<int> initial)
  {
    ready_ = std::move(initial);
    for (;;) {
      start_ready();
      if (comms_.empty() && timers_.empty())
        break;
      if (!timers_.empty() && (comms_.empty() || timers_.top().first <= sg4::Engine::get_clock())) {
        sg4::this_actor::sleep_until(timers_.top().first);
      } else {
        double timeout = timers_.empty() ? -1.0 : timers_.top().first - sg4::Engine::get_clock();
        ssize_t index  = sg4::Comm::wait_any_for(comms_, timeout);
        if (index >= 0)
          end_comm(static_cast<std::size_t>(index));
      }
      while (!timers_.empty() && timers_.top().first <= sg4::Engine::get_clock()) {
        int timer = timers_.top().second;
        timers_.pop();
        if (timer < 0)
          start_comm(-1 - timer);
        else
          finish(timer);
      }
    }
  }

private:
  // Starting an op may end it at once (empty transfer, zero delay), which may make more ops ready.
  void start_ready()
  {
    while (!ready_.empty()) {
      if (comms_.size() + timers_.size() >= kWorkerOps) {
        const auto take = static_cast<std::ptrdiff_t>(std::min(ready_.size(), kWorkerOps));
        spawn_worker(s_, std::vector<int>(ready_.end() - take, ready_.end()));
        ready_.resize(ready_.size() - static_cast<std::size_t>(take));
        continue;
      }
      int op = ready_.back();
      ready_.pop_back();
      const Op& o         = s_.ops[op];
      s_.timing[op].start = sg4::Engine::get_clock();
      if (o.kind == Op::Kind::transfer && o.bytes > 0 && o.src != o.dst) {
        // The route's latency first (SimGrid's links have none, see SimgridPlatform), then the bytes: CM02's
        // alpha-beta. A latency timer carries -1 - op.
        const double latency = s_.latency_factor * s_.topology.route_latency(s_.topology.route(o.src, o.dst, o.qp));
        if (latency > 0)
          timers_.emplace(s_.timing[op].start + latency, -1 - op);
        else
          start_comm(op);
      } else if (o.kind == Op::Kind::delay && o.duration > 0) {
        timers_.emplace(s_.timing[op].start + o.duration, op);
      } else {
        finish(op);
      }
    }
  }

  void start_comm(int op)
  {
    const Op& o        = s_.ops[op];
    const auto payload = static_cast<uint64_t>(o.bytes * o.stretch + 0.5);
    auto [comm, box]   = outbox_.put(s_.platform.host(o.src, o.qp), s_.platform.host(o.dst, o.qp), payload,
                                     std::min(s_.topology.window_rate(o.src, o.dst, o.qp, o.window),
                                            o.rate > 0 ? o.rate : std::numeric_limits<double>::infinity()));
    comms_.push_back(std::move(comm));
    comm_op_.push_back(op);
    comm_box_.push_back(box);
  }

  void end_comm(std::size_t index)
  {
    const int op          = comm_op_[index];
    const std::size_t box = comm_box_[index];
    comms_[index]         = std::move(comms_.back());
    comm_op_[index]       = comm_op_.back();
    comm_box_[index]      = comm_box_.back();
    comms_.pop_back();
    comm_op_.pop_back();
    comm_box_.pop_back();
    outbox_.ended(box); // after the comm is dropped: clearing its mailbox finishes what it still holds
    finish(op);
  }

  void finish(int op)
  {
    s_.timing[op].end = sg4::Engine::get_clock();
    ++s_.done;
    for (int i = s_.dependents_first[op]; i < s_.dependents_first[op + 1]; ++i)
      if (--s_.remaining[s_.dependents[i]] == 0)
        ready_.push_back(s_.dependents[i]);
  }

  Schedule& s_;
  Outbox& outbox_;
  std::vector<int> ready_;
  std::vector<sg4::CommPtr> comms_;
  std::vector<int> comm_op_;
  std::vector<std::size_t> comm_box_;
  using Timer = std::pair<double, int>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
};

void spawn_worker(Schedule& s, std::vector<int> initial)
{
  sg4::Actor::create("worker", s.home, [&s, initial = std::move(initial)]() mutable {
    Worker worker(s);
    worker.run(std::move(initial));
  });
}

/// @brief The GPUs a graph's transfers touch: the platform holds hosts and links for these only.
std::vector<bool> used_gpus(const topology::Topology& topology, const FlowGraph& graph)
{
  std::vector<bool> used(topology.gpu_count(), false);
  used[0] = true; // the workers' home
  for (const auto& o : graph.ops())
    if (o.kind == Op::Kind::transfer && o.bytes > 0 && o.src != o.dst)
      used[o.src] = used[o.dst] = true;
  return used;
}

// Runs the graph inside the current process.
std::vector<OpTiming> simulate(const topology::Topology& topology, const FlowGraph& graph,
                               const SimgridSettings& settings, const std::vector<bool>& slack)
{
  int argc     = 1;
  char name[]  = "spansim";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  detail::configure_engine(engine, settings);
  SimgridPlatform platform(topology, settings.gpu_speed, used_gpus(topology, graph), slack);

  const auto& ops = graph.ops();
  const auto n    = ops.size();
  Schedule s{ops,
             topology,
             platform,
             platform.host(0),
             std::vector<OpTiming>(n),
             std::vector<int>(n),
             std::vector<int>(n + 1, 0),
             {},
             0};
  for (std::size_t i = 0; i < n; ++i) {
    s.remaining[i] = static_cast<int>(ops[i].deps.size());
    for (int d : ops[i].deps)
      ++s.dependents_first[d + 1];
  }
  for (std::size_t i = 0; i < n; ++i)
    s.dependents_first[i + 1] += s.dependents_first[i];
  s.dependents.resize(s.dependents_first[n]);
  std::vector<int> fill(s.dependents_first.begin(), s.dependents_first.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    for (int d : ops[i].deps)
      s.dependents[fill[d]++] = static_cast<int>(i);

  std::vector<int> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (s.remaining[i] == 0)
      ready.push_back(static_cast<int>(i));
  Outbox outbox(s.home);
  s.outbox         = &outbox;
  s.latency_factor = settings.latency_factor;
  spawn_worker(s, std::move(ready));
  engine.run();
  if (s.done != n)
    throw SimulationError("flow simulation ended with " + std::to_string(n - s.done) + " of " + std::to_string(n) +
                          " ops not run");
  return std::move(s.timing);
}

} // namespace

bool SimgridSettings::analytical_model() const
{
  return network_model == "CM02" && !crosstraffic && tcp_gamma == 0 && latency_factor == 1 && bandwidth_factor == 1 &&
         weight_s == 0;
}

// ASan's redzones and fake frames need SimGrid's own 8 MiB.
constexpr std::size_t kDefaultActorStackKib = kAddressSanitizer ? 8192 : 256;

std::vector<std::string> SimgridSettings::config_lines() const
{
  return {"network/model:" + network_model,
          "network/optim:" + network_optim,
          std::string("network/crosstraffic:") + (crosstraffic ? "1" : "0"),
          "network/TCP-gamma:" + num(tcp_gamma),
          "network/latency-factor:" + num(latency_factor),
          "network/bandwidth-factor:" + num(bandwidth_factor),
          "network/weight-S:" + num(weight_s),
          "maxmin/precision:" + num(maxmin_precision),
          "surf/precision:" + num(timing_precision),
          "contexts/stack-size:" + std::to_string(actor_stack_kib > 0 ? actor_stack_kib : kDefaultActorStackKib)};
}

nlohmann::json SimgridSettings::to_json() const
{
  nlohmann::json config = nlohmann::json::object();
  for (const auto& line : config_lines()) {
    auto colon                    = line.find(':');
    config[line.substr(0, colon)] = line.substr(colon + 1);
  }
  return {{"engine", "simgrid"},
          {"simgrid_version", std::to_string(SIMGRID_VERSION_MAJOR) + "." + std::to_string(SIMGRID_VERSION_MINOR) +
                                  "." + std::to_string(SIMGRID_VERSION_PATCH)},
          {"config", config},
          {"latency", "paid by spansim before each flow's bytes; SimGrid links have none, so CM02's "
                      "latency-weighted sharing reduces to equal max-min shares"},
          {"gpu_speed_flops", gpu_speed},
          {"leave_out_slack_links",
           !leave_out_slack_links ? "no"
           : detail::slack_links_apply(*this)
               ? "yes: link directions whose flows' first or last hops add up to no more than their capacity are "
                 "left out of routes (the same max-min shares)"
               : "no: needs CM02 without cross traffic or weight-S"}};
}

RunResult run_flow(const topology::Topology& topology, const FlowGraph& graph, const SimgridSettings& settings)
{
  for (const auto& op : graph.ops())
    if (op.kind == Op::Kind::transfer &&
        (op.src < 0 || op.dst < 0 || op.src >= topology.gpu_count() || op.dst >= topology.gpu_count()))
      throw UsageError("flow graph: transfer between GPUs " + std::to_string(op.src) + " and " +
                       std::to_string(op.dst) + " outside the topology's " + std::to_string(topology.gpu_count()) +
                       " GPUs");
  std::vector<bool> slack;
  if (settings.leave_out_slack_links && detail::slack_links_apply(settings))
    slack = detail::slack_links(topology, graph);
  std::string bytes = process::run_in_child([&] {
    auto timing = simulate(topology, graph, settings, slack);
    return std::string(reinterpret_cast<const char*>(timing.data()), timing.size() * sizeof(OpTiming));
  });
  RunResult result;
  if (bytes.size() != graph.ops().size() * sizeof(OpTiming))
    throw SimulationError("the simulation process returned a truncated result");
  result.ops.resize(graph.ops().size());
  std::memcpy(result.ops.data(), bytes.data(), bytes.size());
  for (const auto& t : result.ops)
    result.makespan = std::max(result.makespan, t.end);
  result.settings                                   = settings.to_json();
  result.settings["slack_link_directions_left_out"] = std::count(slack.begin(), slack.end(), true);
  result.link_bytes                                 = link_bytes(topology, graph);
  return result;
}

std::vector<std::string> route_link_names(const topology::Topology& topology, const std::vector<topology::Hop>& route)
{
  std::vector<std::string> names;
  for (const auto& h : route)
    names.push_back(SimgridPlatform::link_name(topology, h.link) + (h.forward ? "_UP" : "_DOWN"));
  return names;
}

std::vector<std::vector<std::string>>
simgrid_routes(const topology::Topology& topology, const std::vector<std::pair<int, int>>& pairs, bool leave_out_slack)
{
  auto valid = [&](int gpu) { return gpu >= 0 && gpu < topology.gpu_count(); };
  std::vector<bool> used(topology.gpu_count(), false);
  FlowGraph graph; // one transfer per pair, for the slack links
  for (auto [src, dst] : pairs)
    if (valid(src) && valid(dst)) {
      used[src] = used[dst] = true;
      graph.add_transfer(src, dst, 1);
    }
  const auto slack = leave_out_slack ? detail::slack_links(topology, graph) : std::vector<bool>{};
  std::string text = process::run_in_child([&] {
    int argc     = 1;
    char name[]  = "spansim";
    char* argv[] = {name, nullptr};
    sg4::Engine engine(&argc, argv);
    detail::configure_engine(engine, SimgridSettings{});
    SimgridPlatform platform(topology, 1e15, used, slack);
    nlohmann::json out = nlohmann::json::array();
    for (auto [src, dst] : pairs) {
      std::vector<sg4::Link*> links;
      double latency = 0;
      platform.host(src)->route_to(platform.host(dst), links, &latency);
      nlohmann::json names = nlohmann::json::array();
      for (auto* l : links)
        names.push_back(l->get_name());
      out.push_back(names);
    }
    return out.dump();
  });
  return nlohmann::json::parse(text).get<std::vector<std::vector<std::string>>>();
}

} // namespace spansim::netsim
