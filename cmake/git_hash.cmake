# Writes OUT with the current git hash; rewritten only when the hash changes so rebuilds stay incremental.
execute_process(
  COMMAND git -C "${SRC}" rev-parse HEAD
  OUTPUT_VARIABLE hash
  OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE rc
  ERROR_QUIET)
if(NOT rc EQUAL 0 OR hash STREQUAL "")
  set(hash "unknown")
else()
  execute_process(
    COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
    OUTPUT_VARIABLE dirty
    OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(hash "${hash}-dirty")
  endif()
endif()
set(content "#include \"common/version.hpp\"\nnamespace spansim {\nconst char* version() { return \"${VERSION}\"; }\nconst char* git_hash() { return \"${hash}\"; }\n} // namespace spansim\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
