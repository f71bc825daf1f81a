#pragma once
/// @file
/// @brief What the small searches share (the DLRM search, `spansim share --place`): candidates tried in order with
/// progress, then ranked with those that ran first.

#include <algorithm>
#include <cstddef>
#include <functional>
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

} // namespace spansim
