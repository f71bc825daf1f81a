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
      {"a\xc2\xa0"
       "b",
       "a\\u00a0b"},                                  // a no-break space, which shows as a plain one
      {"\xc2\x85", "\\u0085"},                        // a C1 control (NEL)
      {"x\xe2\x80\xaey", "x\\u202ey"},                // a right-to-left override, which reorders what follows
      {"\xe2\x80\x8b\xef\xbb\xbf", "\\u200b\\ufeff"}, // zero-width space, byte-order mark
  };
  for (const auto& c : cases) {
    const std::string actual = escape_controls(c.in);
    std::cout << "expected \"" << c.expected << "\", actual \"" << actual << "\"\n";
    CHECK(actual == c.expected);
    CHECK(escape_controls(actual) == actual); // escaped text escapes to itself
  }
}

TEST_CASE("error messages are bounded: a long list is named in part, a huge message is cut and says so", "[error]")
{
  std::vector<std::string> labels;
  for (int i = 0; i < 200000; ++i)
    labels.push_back("node" + std::to_string(i));
  const auto listed = spansim::listing(labels);
  CHECK(listed.rfind("node0, node1, ", 0) == 0);
  CHECK(listed.find("node19, and 199980 more") != std::string::npos);
  CHECK(spansim::listing({"a", "b"}) == "a, b");
  // A message past the bound (a list joined in full) keeps its start, one line, and the total it had.
  std::string all;
  for (const auto& l : labels)
    all += l + ", ";
  const spansim::UsageError e("no node has that label (nodes: " + all + ")");
  const std::string what = e.what();
  CHECK(what.size() < spansim::kMaxMessageBytes + 100);
  CHECK(what.rfind("no node has that label (nodes: node0, ", 0) == 0);
  CHECK(what.find(" bytes in all)") != std::string::npos);
  // Cut at a character boundary: a multi-byte character across the bound is not split.
  // (Words of nine letters: a longer run of letters would be cut as an echoed value first.)
  std::string words;
  while (words.size() < spansim::kMaxMessageBytes - 1)
    words += words.size() % 10 == 9 ? ' ' : 'x';
  const spansim::UsageError u(words + "\xc2\xb5" + "tail");
  const std::string w = u.what();
  CHECK(w.substr(spansim::kMaxMessageBytes - 1, 5) == " ... ");
}

TEST_CASE("an error echoes at most 200 characters of any one value and says how long it was", "[error]")
{
  const std::string value(5000, 'v');
  struct Case {
    std::string in;
    std::string expected;
  };
  const std::string kept(spansim::kMaxEchoChars, 'v');
  const std::vector<Case> cases{
      {"unknown key \"" + value + "\" (allowed here: a, b)",
       "unknown key \"" + kept + "\" (cut at 200 of its 5000 characters) (allowed here: a, b)"},
      {"invalid size " + value + ": no unit", "invalid size " + kept + " (cut at 200 of its 5000 characters): no unit"},
      // Characters, not bytes: a 300-character value of two-byte characters keeps 200 of them whole.
      {"name \"" +
           [] {
             std::string s;
             for (int i = 0; i < 300; ++i)
               s += "\xc2\xb5";
             return s;
           }() +
           "\"",
       "name \"" +
           [] {
             std::string s;
             for (int i = 0; i < 200; ++i)
               s += "\xc2\xb5";
             return s;
           }() +
           "\" (cut at 200 of its 300 characters)"},
      // A value of exactly 200 characters, and spansim's own words, pass unchanged.
      {"value \"" + kept + "\" is fine", "value \"" + kept + "\" is fine"},
      {"an unclosed \"quote and words", "an unclosed \"quote and words"},
  };
  for (const auto& c : cases) {
    const std::string actual = spansim::cut_long_echoes(c.in);
    INFO("expected " << c.expected << "\nactual   " << actual);
    CHECK(actual == c.expected);
    // Cutting again changes nothing: an error rebuilt from another's message says the same.
    CHECK(spansim::cut_long_echoes(actual) == actual);
    CHECK(spansim::UsageError(c.in).what() == c.expected);
  }
  const spansim::SpecError e("f.json", "$.a", "unknown value \"" + value + "\"");
  CHECK(e.detail() == "unknown value \"" + kept + "\" (cut at 200 of its 5000 characters)");
}
