#pragma once
/// @file
/// @brief The functions and exception types of the `_spansim` extension, defined on a module: the extension
/// (module.cpp) and the Python fuzz target (fuzz/fuzz_python.cpp, an interpreter embedded) define the same.

#include <pybind11/pybind11.h>

namespace spansim::python {

/// @brief Defines run, command, version and the exception types (Error, SpecError, UsageError, TraceError) on `m`.
/// Once per process: the exception types live until the interpreter ends.
void define_module(pybind11::module_& m);

} // namespace spansim::python
