// Error messages stay one line of valid UTF-8 whatever bytes the input had (escape_controls).
#include "common/error.hpp"

#include <catch2/catch.hpp>

#include <iostream>
#include <string>

using namespace spansim;

TEST_CASE("escape_controls passes well-formed UTF-8 and escapes every other byte", "[error]")
{
  struct Case {
    std::string in, expected;
  };
  const Case cases[] = {
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"}, // 2, 3, 4 bytes
      {"a\nb\tc\x1b", "a\\nb\\tc\\u001b"},          // controls as JSON escapes them
      {"\xff\xfe", "\\xff\\xfe"},                   // never a lead byte
      {"\xf5\x80\x80\x80", "\\xf5\\x80\\x80\\x80"}, // above U+10FFFF's lead byte
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"}, // above U+10FFFF
      {"\xc0\xaf", "\\xc0\\xaf"},                   // overlong '/'
      {"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},          // overlong, 3 bytes
      {"\xf0\x80\x80\xaf", "\\xf0\\x80\\x80\\xaf"}, // overlong, 4 bytes
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},          // a surrogate (U+D800)
      {"\xed\x9f\xbf", "\xed\x9f\xbf"},             // U+D7FF, just below them
      {"\xe2\x82", "\\xe2\\x82"},                   // cut short
  };
  for (const auto& c : cases) {
    const std::string actual = escape_controls(c.in);
    std::cout << "expected \"" << c.expected << "\", actual \"" << actual << "\"\n";
    CHECK(actual == c.expected);
    CHECK(escape_controls(actual) == actual); // escaped text escapes to itself
  }
}
