// The C++ side of `import spansim`: a scenario run through the same libraries as `spansim run`, any other command
// run in this process with its JSON returned, and spansim's typed errors as Python exceptions. The Python package
// (python/spansim) turns the JSON into dicts and pandas DataFrames.
#include "python/bindings.hpp"

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/version.hpp"
#include "netsim/netsim.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include <pybind11/stl.h>

#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// A scenario from a path (errors name the file) or from JSON text (errors name `file`, as a dict has no file).
spansim::scenario::Scenario load(const std::string& path_or_json, bool is_json, const std::string& file)
{
  if (!is_json)
    return spansim::scenario::load_scenario(path_or_json);
  return spansim::scenario::parse_scenario(spansim::spec::parse_json_text(path_or_json, file), file);
}

py::tuple run(const std::string& path_or_json, bool is_json, const std::string& file, const std::string& fidelity)
{
  std::string summary, layers;
  {
    // Simulations run in forked children (one SimGrid engine per process), so the GIL can go while they run.
    py::gil_scoped_release release;
    auto scenario = load(path_or_json, is_json, file);
    if (!fidelity.empty())
      scenario.options.fidelity = spansim::parse_enum<spansim::netsim::Fidelity>(fidelity, "fidelity");
    const auto result = spansim::scenario::run_scenario(scenario);
    auto json         = spansim::report::summary_json(result);
    // As `spansim run --json --no-outputs` prints it.
    json["outputs_written"] = nlohmann::json::array();
    summary                 = json.dump();
    layers                  = spansim::report::layers_csv(result);
  }
  return py::make_tuple(summary, layers);
}

std::string command(const std::vector<std::string>& args)
{
  py::gil_scoped_release release;
  return spansim::cli::run_captured(args);
}

} // namespace

namespace spansim::python {

void define_module(py::module_& m)
{
  m.doc() = "spansim's C++ libraries (use the spansim package)";
  // Never freed: the translator may run until the interpreter ends, and freeing after it would touch dead types.
  static auto* error       = new py::exception<spansim::Error>(m, "Error");
  static auto* spec_error  = new py::exception<spansim::SpecError>(m, "SpecError", error->ptr());
  static auto* usage_error = new py::exception<spansim::UsageError>(m, "UsageError", error->ptr());
  // A bad trace is bad input as a bad spec is: a SpecError whose json_path is the node, record or event.
  static auto* trace_error = new py::exception<spansim::TraceError>(m, "TraceError", spec_error->ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const spansim::SpecError& e) {
      // The same line `spansim` prints after "spansim: error: ", with the file, the JSON path (a trace's node,
      // record or event) and what is wrong as attributes.
      PyObject* type        = dynamic_cast<const spansim::TraceError*>(&e) ? trace_error->ptr() : spec_error->ptr();
      py::object exc        = py::handle(type)(e.what());
      exc.attr("file")      = e.file();
      exc.attr("json_path") = e.json_path();
      exc.attr("detail")    = e.detail();
      PyErr_SetObject(type, exc.ptr());
    } catch (const spansim::UsageError& e) {
      (*usage_error)(e.what());
    } catch (const spansim::Error& e) {
      (*error)(e.what());
    }
  });
  m.def("run", &run, py::arg("path_or_json"), py::arg("is_json"), py::arg("file"), py::arg("fidelity"),
        "Runs a scenario; returns (summary JSON, layers CSV).");
  m.def("command", &command, py::arg("args"), "Runs a spansim command line in this process; returns its stdout.");
  m.def("version", [] { return std::string(spansim::version()) + " (" + spansim::git_hash() + ")"; });
}

} // namespace spansim::python
