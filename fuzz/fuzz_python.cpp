/// @file
/// @brief Fuzz target: the Python API's conversion of values. The input decodes to any Python value a caller could
/// pass (dicts, lists, tuples, sets, text with lone surrogates and NULs, bytes, huge integers, NaN, circular and
/// 5,000-deep structures, path-like objects), which goes where the package takes a spec: as JSON text, as a path,
/// as a command's argument, and as a job spec that `workload describe` reads (a site is not built: a mutated
/// topology would describe giants). Only spansim.Error may refuse it; any other Python exception is a finding. The
/// interpreter is embedded, with the extension's functions defined in-process (python/bindings.cpp), so that the
/// sanitizers see the C++ side.
#include "fuzz/fuzz.hpp"
#include "python/bindings.hpp"

#include <pybind11/embed.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace py = pybind11;

PYBIND11_EMBEDDED_MODULE(_spansim, m)
{
  spansim::python::define_module(m);
}

namespace {

// The decoder and the calls. A stack machine: each byte's low four bits pick an operation, so that libFuzzer's
// mutations of a seed (a job as JSON text, operation 0) keep most of it and change one value.
constexpr const char* kHarness = R"py(
import json, struct, sys
sys.path.insert(0, SOURCE_DIR + "/python")
import _spansim
sys.modules["spansim._spansim"] = _spansim
import spansim


class PathLike:
    """An os.PathLike whose __fspath__ returns what it holds (str, bytes or anything else)."""

    def __init__(self, value):
        self.value = value

    def __fspath__(self):
        return self.value


def decode(data):
    stack, pos = [], 0

    def take(n):
        nonlocal pos
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    def byte():
        b = take(1)
        return b[0] if b else 0

    def pop(n):
        items = stack[len(stack) - n:] if n else []
        del stack[len(stack) - n:]
        return items

    while pos < len(data) and len(stack) < 10000:
        op = byte() % 16
        if op == 0:
            text = take(int.from_bytes(take(2), "little")).decode("utf-8", "surrogateescape")
            try:
                stack.append(json.loads(text))
            except (ValueError, RecursionError):
                stack.append(text)
        elif op == 1:
            stack.append(take(byte()).decode("utf-8", "surrogateescape"))
        elif op == 2:
            stack.append(take(byte()))
        elif op == 3:
            stack.append(int.from_bytes(take(8), "little", signed=True))
        elif op == 4:
            stack.append(10 ** (byte() * 40) * (-1 if byte() % 2 else 1))
        elif op == 5:
            stack.append(struct.unpack("<d", take(8).ljust(8, b"\0"))[0])
        elif op == 6:
            stack.append((None, True, False, float("nan"), float("inf"), -0.0, 1e308)[byte() % 7])
        elif op in (7, 8, 9):
            items = pop(min(byte() % 8, len(stack)))
            if op == 9:
                try:
                    items = set(items)
                except TypeError:
                    items = tuple(items)
            stack.append(list(items) if op == 7 else items if op == 9 else tuple(items))
        elif op == 10:
            items = pop(min(2 * (byte() % 5), len(stack) // 2 * 2))
            d = {}
            for k, v in zip(items[::2], items[1::2]):
                try:
                    d[k] = v
                except TypeError:  # an unhashable key: a text key in its place (its repr may be huge)
                    d["key%d" % len(d)] = v
            stack.append(d)
        elif op == 11 and stack:
            top = stack[-1]
            if isinstance(top, list):
                top.append(top)
            elif isinstance(top, dict):
                top["self"] = top
        elif op == 12 and stack:
            value = stack.pop()
            for _ in range((byte() + 1) * 20):
                value = [value]
            stack.append(value)
        elif op == 13 and stack:
            stack.append(PathLike(stack.pop()))
        elif op == 14 and len(stack) >= 3:
            value, key = stack.pop(), stack.pop()
            top = stack[-1]
            if isinstance(top, dict):
                try:
                    top[key] = value
                except TypeError:
                    pass
            elif isinstance(top, list) and top and isinstance(key, int):
                top[key % len(top)] = value
    return stack[-1] if stack else None


def exercise(data):
    """Why spansim refused the value as a job spec ("" when it read it). The value also goes in as JSON text, as
    a path and as a command's argument, where only spansim.Error may refuse it too."""
    try:
        value = decode(data)
    except (ValueError, RecursionError, OverflowError, MemoryError):
        return ""  # the decoder's own limits (Python's on huge numbers), not the API's
    for call in (lambda: spansim._json_text(value, "spec"), lambda: spansim._path(value, "spec"),
                 lambda: spansim._command(["workload", "describe", value, "--json"])):
        try:
            call()
        except spansim.Error:
            pass
    try:
        with spansim._SpecFile(value, "job.json") as path:
            spansim._command(["workload", "describe", path, "--json"])
    except spansim.Error as e:
        return str(e) or type(e).__name__
    return ""
)py";

// The interpreter and the harness's exercise(): started once, never finalized (libFuzzer exits the process).
py::object& exercise()
{
  static py::object f = [] {
    new py::scoped_interpreter();
    py::dict scope;
    scope["__builtins__"] = py::module_::import("builtins");
    scope["SOURCE_DIR"]   = SPANSIM_SOURCE_DIR;
    py::exec(kHarness, scope);
    return py::object(scope["exercise"]);
  }();
  return f;
}

} // namespace

// The interpreter's own objects live until the process ends: not leaks of spansim's.
extern "C" const char* __asan_default_options()
{
  return "detect_leaks=0";
}

// The interpreter starts, and imports the package (pandas with it), before the first input: that takes seconds under
// the sanitizers, and must not count as the first input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***)
{
  exercise();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  try {
    const auto why = exercise()(py::bytes(reinterpret_cast<const char*>(data), size)).cast<std::string>();
    if (!why.empty()) {
      ++spansim::fuzz::refused_count();
      if (std::getenv("SPANSIM_FUZZ_VERBOSE") != nullptr)
        std::fprintf(stderr, "refused: %s\n", why.c_str());
    }
  } catch (const py::error_already_set& e) {
    std::fprintf(stderr, "fuzz finding: a Python exception other than spansim.Error escaped the API: %s\n", e.what());
    std::abort();
  }
  return 0;
}
