#include "runtime/stream_batch.h"

#include <algorithm>

namespace uma {

void arrange_for_streams(std::span<const BatchEntry> in, const StreamBatchOptions& options, StreamBatch& out) {
  out.entries.clear();
  out.fillers.clear();
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
  std::vector<StreamFiller> gap;
  std::int32_t prev_seq = -1;
  // First entries, in id order, with the missing ids between them filled where that is allowed.
  for (std::size_t k = 0; k < by_seq.size(); ++k) {
    const BatchEntry& e = in[static_cast<std::size_t>(by_seq[k])];
    if (k > 0 && in[static_cast<std::size_t>(by_seq[k - 1])].seq == e.seq) continue;
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
          out.entries.push_back({options.filler_token, f.pos, f.seq, false});
          out.fillers.push_back(f);
        }
        spare -= missing;
      }
    }
    place(by_seq[k]);
    prev_seq = e.seq;
  }
  // Then every sequence's remaining entries, by id.
  for (std::size_t k = 1; k < by_seq.size(); ++k) {
    if (in[static_cast<std::size_t>(by_seq[k - 1])].seq == in[static_cast<std::size_t>(by_seq[k])].seq) place(by_seq[k]);
  }
}

}  // namespace uma
