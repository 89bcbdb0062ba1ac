#include "runtime/stream_batch.h"

#include <algorithm>

namespace uma {

namespace {

constexpr std::int32_t kKvPad = 256;  // llama.cpp's padding of a pass's KV extent

std::int32_t padded(std::int32_t cells) { return (cells + kKvPad - 1) / kKvPad * kKvPad; }

// The sequence to put in a pass of its own (deep_pass_row_cells), and whether it goes first (the
// highest id) or last (the lowest); -1 when none.
std::int32_t deep_sequence(std::span<const BatchEntry> in, const std::vector<std::int32_t>& by_seq,
                           std::int64_t row_cells, bool* first) {
  if (row_cells <= 0 || in.empty()) return -1;
  // Each sequence's extent after this decode: its highest position + 1.
  std::vector<std::pair<std::int32_t, std::int32_t>> extent;  // (seq, padded cells), by seq
  for (std::int32_t i : by_seq) {
    const BatchEntry& e = in[static_cast<std::size_t>(i)];
    if (extent.empty() || extent.back().first != e.seq) extent.emplace_back(e.seq, 0);
    extent.back().second = std::max(extent.back().second, padded(e.pos + 1));
  }
  if (extent.size() < 2) return -1;
  for (const bool highest : {true, false}) {
    const auto& deep = highest ? extent.back() : extent.front();
    std::int32_t rest = 0;
    for (const auto& [seq, cells] : extent) {
      if (seq != deep.first) rest = std::max(rest, cells);
    }
    const std::int64_t others = static_cast<std::int64_t>(extent.size()) - 1;
    if (deep.second > rest && others * (deep.second - rest) >= row_cells) {
      *first = highest;
      return deep.first;
    }
  }
  return -1;
}

// Puts out.entries in the order of their passes' outputs (out.index_of follows). Reordering can
// only join passes (a pass's sequences now come before any later one's), so it is repeated until
// the order is its own passes' order; a few rounds at most.
void order_as_passes(std::int32_t n_ubatch, StreamBatch& out) {
  // A plain tick's rows (one entry a sequence, ids rising) are their passes' order already: every
  // tick's case, so the model is not run for it.
  bool rising = true;
  for (std::size_t i = 1; i < out.entries.size() && rising; ++i) rising = out.entries[i].seq > out.entries[i - 1].seq;
  if (rising) return;
  std::vector<std::int32_t> order, moved_to;
  std::vector<BatchEntry> entries;
  for (int round = 0; round < 4; ++round) {
    order.clear();
    for (const auto& pass : llama_passes(out.entries, n_ubatch)) order.insert(order.end(), pass.begin(), pass.end());
    bool same = true;
    for (std::size_t j = 0; j < order.size() && same; ++j) same = order[j] == static_cast<std::int32_t>(j);
    if (same) return;
    moved_to.assign(order.size(), -1);
    entries.clear();
    for (std::size_t j = 0; j < order.size(); ++j) {
      moved_to[static_cast<std::size_t>(order[j])] = static_cast<std::int32_t>(j);
      entries.push_back(out.entries[static_cast<std::size_t>(order[j])]);
    }
    out.entries.swap(entries);
    for (std::int32_t& i : out.index_of) i = moved_to[static_cast<std::size_t>(i)];
  }
}

// One sequence's entries after its first, by_seq[first, first + length), and the padding it gets.
struct Rest {
  std::int32_t seq = 0;
  std::size_t first = 0;
  std::int32_t length = 0;
  std::int32_t pad = 0;
};

// Pads each run of consecutive ids in `rests` to its longest, where that saves passes at no more
// than options.pad_entries_per_pass entries each and fits `room` and every sequence's cells.
void plan_padding(std::span<const BatchEntry> in, const std::vector<std::int32_t>& by_seq,
                  const StreamBatchOptions& options, std::int64_t room, std::vector<Rest>& rests) {
  if (options.pad_entries_per_pass <= 0 || !options.filler_pos || options.seq_cells <= 0) return;
  std::vector<BatchEntry> run_entries;
  for (std::size_t a = 0; a < rests.size();) {
    std::size_t b = a + 1;
    while (b < rests.size() && rests[b].seq == rests[b - 1].seq + 1) ++b;
    std::int32_t longest = 0;
    for (std::size_t r = a; r < b; ++r) longest = std::max(longest, rests[r].length);
    std::int64_t pad = 0;
    bool fits = true;
    run_entries.clear();
    for (std::size_t r = a; r < b; ++r) {
      pad += longest - rests[r].length;
      const std::int32_t last = in[static_cast<std::size_t>(by_seq[rests[r].first + static_cast<std::size_t>(rests[r].length) - 1])].pos;
      fits = fits && last + (longest - rests[r].length) < options.seq_cells;
      for (std::int32_t k = 0; k < rests[r].length; ++k) run_entries.push_back({0, k, rests[r].seq, false});
    }
    const auto n = static_cast<std::int64_t>(b - a);
    if (n > 1 && pad > 0 && fits && pad <= room) {
      // Padded, the run's passes each take the same share of every sequence (llama_passes).
      const std::int64_t share = options.n_ubatch > 0 ? std::max<std::int64_t>(1, options.n_ubatch / n) : longest;
      const std::int64_t after = (longest + share - 1) / share;
      const auto before = static_cast<std::int64_t>(llama_passes(run_entries, options.n_ubatch).size());
      if (before > after && pad <= options.pad_entries_per_pass * (before - after)) {
        for (std::size_t r = a; r < b; ++r) rests[r].pad = longest - rests[r].length;
        room -= pad;
      }
    }
    a = b;
  }
}

}  // namespace

std::vector<std::vector<std::int32_t>> llama_passes(std::span<const BatchEntry> entries, std::int32_t n_ubatch) {
  const auto limit = static_cast<std::size_t>(n_ubatch > 0 ? n_ubatch : INT32_MAX);
  // Each sequence's entries in batch order, and how many of them passes took.
  std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> of_seq;  // by first appearance
  std::vector<std::size_t> taken;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto it = std::find_if(of_seq.begin(), of_seq.end(), [&](const auto& q) { return q.first == entries[i].seq; });
    if (it == of_seq.end()) it = of_seq.insert(of_seq.end(), {entries[i].seq, {}});
    it->second.push_back(static_cast<std::int32_t>(i));
  }
  taken.assign(of_seq.size(), 0);
  std::vector<bool> used(entries.size(), false);
  std::vector<std::vector<std::int32_t>> passes;
  std::vector<std::size_t> chain;  // indices into of_seq
  for (std::size_t done = 0; done < entries.size();) {
    chain.clear();
    for (std::size_t i = 0; i < entries.size() && chain.size() <= limit; ++i) {
      if (used[i]) continue;
      const std::int32_t seq = entries[i].seq;
      if (!chain.empty() && seq != of_seq[chain.back()].first + 1) continue;
      const auto at = static_cast<std::size_t>(
          std::find_if(of_seq.begin(), of_seq.end(), [&](const auto& q) { return q.first == seq; }) - of_seq.begin());
      if (std::find(chain.begin(), chain.end(), at) == chain.end()) chain.push_back(at);
    }
    std::size_t take = SIZE_MAX;
    for (std::size_t q : chain) take = std::min(take, of_seq[q].second.size() - taken[q]);
    take = std::max<std::size_t>(1, std::min(take, limit / chain.size()));
    std::vector<std::int32_t>& pass = passes.emplace_back();
    for (std::size_t q : chain) {
      for (std::size_t k = 0; k < take; ++k) {
        const std::int32_t i = of_seq[q].second[taken[q]++];
        used[static_cast<std::size_t>(i)] = true;
        pass.push_back(i);
      }
    }
    done += pass.size();
  }
  return passes;
}

void arrange_for_streams(std::span<const BatchEntry> in, const StreamBatchOptions& options, StreamBatch& out) {
  out.entries.clear();
  out.fillers.clear();
  out.pads.clear();
  out.pad_entries = 0;
  out.index_of.assign(in.size(), -1);
  // Caller's indices by sequence id, each sequence's in the caller's (position) order.
  std::vector<std::int32_t> by_seq(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) by_seq[i] = static_cast<std::int32_t>(i);
  std::stable_sort(by_seq.begin(), by_seq.end(), [&](std::int32_t a, std::int32_t b) { return in[a].seq < in[b].seq; });

  std::int64_t spare = options.max_entries > 0 ? options.max_entries - static_cast<std::int64_t>(in.size()) : INT64_MAX;
  const auto place = [&](std::int32_t i) {
    out.index_of[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(out.entries.size());
    out.entries.push_back(in[static_cast<std::size_t>(i)]);
  };
  bool deep_first = false;
  const std::int32_t deep = deep_sequence(in, by_seq, options.deep_pass_row_cells, &deep_first);
  out.deep_seq = deep;
  const auto place_deep = [&] {
    for (std::int32_t i : by_seq) {
      if (in[static_cast<std::size_t>(i)].seq == deep) place(i);
    }
  };
  if (deep >= 0 && deep_first) place_deep();
  std::vector<StreamFiller> gap;
  std::int32_t prev_seq = -1;
  // First entries, in id order, with the missing ids between them filled where that is allowed.
  for (std::size_t k = 0; k < by_seq.size(); ++k) {
    const BatchEntry& e = in[static_cast<std::size_t>(by_seq[k])];
    if (e.seq == deep || (k > 0 && in[static_cast<std::size_t>(by_seq[k - 1])].seq == e.seq)) continue;
    const std::int32_t missing = prev_seq < 0 ? 0 : e.seq - prev_seq - 1;
    if (missing > 0 && missing <= options.max_filler_run && missing <= spare && options.filler_pos) {
      // All or nothing: a gap filled in part still ends the chain.
      gap.clear();
      for (std::int32_t g = prev_seq + 1; g < e.seq; ++g) {
        const std::int32_t pos = options.filler_pos(g);
        if (pos < 0) break;
        gap.push_back({g, pos});
      }
      if (static_cast<std::int32_t>(gap.size()) == missing) {
        for (const StreamFiller& f : gap) {
          out.entries.push_back({options.filler_token, f.pos, f.seq, options.first_entries_output});
          out.fillers.push_back(f);
        }
        spare -= missing;
      }
    }
    place(by_seq[k]);
    out.entries.back().logits = out.entries.back().logits || options.first_entries_output;
    prev_seq = e.seq;
  }
  // Then every sequence's remaining entries, by id, runs of consecutive ids padded to one length.
  std::vector<Rest> rests;
  for (std::size_t k = 1; k < by_seq.size(); ++k) {
    const std::int32_t i = by_seq[k];
    const std::int32_t seq = in[static_cast<std::size_t>(i)].seq;
    if (seq == deep || in[static_cast<std::size_t>(by_seq[k - 1])].seq != seq) continue;
    if (rests.empty() || rests.back().seq != seq) rests.push_back({seq, k, 0, 0});
    rests.back().length++;
  }
  plan_padding(in, by_seq, options, options.max_batch - static_cast<std::int64_t>(in.size() + out.fillers.size()), rests);
  for (const Rest& r : rests) {
    for (std::size_t k = r.first; k < r.first + static_cast<std::size_t>(r.length); ++k) place(by_seq[k]);
    if (r.pad == 0) continue;
    const std::int32_t after = in[static_cast<std::size_t>(by_seq[r.first + static_cast<std::size_t>(r.length) - 1])].pos + 1;
    out.pads.push_back({r.seq, after});
    for (std::int32_t p = 0; p < r.pad; ++p) out.entries.push_back({options.filler_token, after + p, r.seq, false});
    out.pad_entries += r.pad;
  }
  if (deep >= 0 && !deep_first) place_deep();
  order_as_passes(options.n_ubatch, out);
}

}  // namespace uma
