#pragma once
/// @file
/// @brief What the small searches share (the DLRM search, `spansim share --place`): candidates tried in order with
/// progress, then ranked with those that ran first, then listed as JSON.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

namespace spansim {

/// @brief Progress of a search: candidates done, candidates in all.
using CandidateProgress = std::function<void(std::size_t done, std::size_t total)>;

/// @brief Calls `try_one(i)` for i in [0, n), telling `progress` (when set) before each and once when all are done.
template <class F>
void try_candidates(std::size_t n, const CandidateProgress& progress, F try_one)
{
  for (std::size_t i = 0; i < n; ++i) {
    if (progress)
      progress(i, n);
    try_one(i);
  }
  if (progress)
    progress(n, n);
}

/// @brief Ranks candidates: those that ran (an empty `refused`) first, then by `key` (anything with <, such as a
/// tuple of figures); ties keep their order.
template <class T, class Key>
void rank_candidates(std::vector<T>& candidates, Key key)
{
  std::stable_sort(candidates.begin(), candidates.end(), [&](const T& a, const T& b) {
    if (a.refused.empty() != b.refused.empty())
      return a.refused.empty();
    return key(a) < key(b);
  });
}

/// @brief The candidates as a JSON array, in their order: each is `describe(c)` (what was tried) with "refused"
/// (why it did not run) or, for one that ran, what `figures(c, j)` adds to it.
template <class T, class Describe, class Figures>
nlohmann::json candidates_json(const std::vector<T>& candidates, Describe describe, Figures figures)
{
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : candidates) {
    nlohmann::json j = describe(c);
    if (!c.refused.empty())
      j["refused"] = c.refused;
    else
      figures(c, j);
    out.push_back(std::move(j));
  }
  return out;
}

} // namespace spansim
