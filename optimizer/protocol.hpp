#pragma once
/// @file
/// @brief The worker protocol of the search (internal to the optimizer): what a worker process or a Slurm array
/// task hands back for a point, and points as lines of text for a farm's work lists. Plain bytes, not JSON: the
/// search builds no JSON per point, and a double read back is the double written.

#include "optimizer/optimizer.hpp"

#include <string>

namespace spansim::optimizer {

/// @brief What a worker hands back for a point: infeasible (with the reason code), or bounded, scored, refined.
struct Outcome {
  std::string reason;  ///< empty: feasible
  std::string failure; ///< why the evaluation failed (out of memory, a worker that died); empty: it ran
  double lower_bound = 0;
  double score       = 0;
  Metrics metrics;
};

/// @brief Numbers and strings appended as bytes.
class Bytes {
public:
  void put(double v) { data_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void put(const std::string& s)
  {
    put(static_cast<double>(s.size()));
    data_ += s;
  }
  std::string take() { return std::move(data_); }

private:
  std::string data_;
};

/// @brief Reads back what Bytes wrote. @throws SimulationError when the record is truncated.
class Reader {
public:
  explicit Reader(const std::string& data) : data_(data) {}
  double number();
  std::string text();
  bool done() const { return pos_ >= data_.size(); }

private:
  const std::string& data_;
  std::size_t pos_ = 0;
};

/// @brief An outcome as a worker's record.
std::string encode(const Outcome& o);
/// @brief A worker's record read back. @throws SimulationError when it is truncated.
Outcome decode(const std::string& data);

} // namespace spansim::optimizer
