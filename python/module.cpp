// The extension module `_spansim` that the Python package (python/spansim) imports: python/bindings.cpp defines it.
#include "python/bindings.hpp"

PYBIND11_MODULE(_spansim, m)
{
  spansim::python::define_module(m);
}
