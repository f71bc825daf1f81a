#include <catch2/catch.hpp>
#include "common/units.hpp"
#include "common/error.hpp"
