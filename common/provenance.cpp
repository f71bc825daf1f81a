#include "common/version.hpp"

namespace spansim {

nlohmann::json provenance()
{
  return {{"tool", "spansim"}, {"version", version()}, {"git_hash", git_hash()}};
}

} // namespace spansim
