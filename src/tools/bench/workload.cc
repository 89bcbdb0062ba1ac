#include "tools/bench/workload.h"

#include <array>
#include <string_view>

namespace uma::bench {
namespace {

constexpr std::array<std::string_view, 96> kWords = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "time", "people", "water", "world", "house", "city", "river", "music", "story", "night",
    "light", "small", "great", "old", "new", "long", "good", "first", "last", "day", "year", "way", "man",
    "work", "life", "school", "part", "place", "number", "system", "program", "question", "government", "end",
    "point", "group", "problem", "fact", "hand", "high", "large", "next", "early", "young", "important", "few",
    "public", "same"};

}  // namespace

std::string PromptMaker::words(int n) {
  std::uniform_int_distribution<std::size_t> pick(0, kWords.size() - 1);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ' ';
    s += kWords[pick(rng_)];
  }
  return s;
}

}  // namespace uma::bench
