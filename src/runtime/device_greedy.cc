#include "runtime/device_greedy.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <cmath>

namespace uma {
namespace {

struct SeqSampler {
  DeviceGreedyShare* share;
  std::int32_t seq;
};

SeqSampler& me(const llama_sampler* smpl) { return *static_cast<SeqSampler*>(smpl->ctx); }

bool ignores_end(const SeqSampler& s) {
  const auto at = static_cast<std::size_t>(s.seq);
  return at < s.share->ignore_end.size() && s.share->ignore_end[at] != 0;
}

const char* name(const llama_sampler*) { return "uma-device-greedy"; }

void apply(llama_sampler* smpl, llama_token_data_array* cur_p) {
  // The host's greedy: the first largest logit (llama_sampler_init_greedy's rule), ends skipped
  // as on the device.
  const SeqSampler& s = me(smpl);
  if (ignores_end(s)) {
    for (std::int32_t t : s.share->end_tokens) {
      if (static_cast<std::size_t>(t) < cur_p->size && cur_p->data[t].id == t) cur_p->data[t].logit = -INFINITY;
    }
  }
  cur_p->selected = 0;
  for (size_t i = 1; i < cur_p->size; ++i) {
    if (cur_p->data[i].logit > cur_p->data[cur_p->selected].logit) cur_p->selected = static_cast<int64_t>(i);
  }
}

llama_sampler* clone(const llama_sampler* smpl);
void free_ctx(llama_sampler* smpl) { delete static_cast<SeqSampler*>(smpl->ctx); }

bool backend_init(llama_sampler*, ggml_backend_buffer_type_t, uint32_t) { return true; }  // argmax runs everywhere

void backend_reset(llama_sampler* smpl) {
  // Called for every sampler before any builds into a new graph: forget the last graph's tensors.
  DeviceGreedyShare* share = me(smpl).share;
  share->logits = nullptr;
  share->argmax = nullptr;
  share->mask = nullptr;
  share->row_seq.clear();
  share->row0_claims.clear();
  share->mask_written = 0;
}

// The logits matrix with the end tokens' columns lowered by each row's amount, an input of the
// graph (in place: the matrix is llama.cpp's padded copy of the logits, which nothing but the
// samplers reads). As every graph input it lives in host memory and reaches the device through
// llama.cpp's scheduler, which orders that copy after the last graph's use of it.
ggml_tensor* mask_ends(DeviceGreedyShare* share, ggml_context* ctx, ggml_tensor* matrix) {
  const std::int64_t n_rows = matrix->ne[1];
  share->mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n_rows);
  ggml_set_name(share->mask, "uma_end_mask");
  ggml_set_input(share->mask);
  ggml_tensor* m = matrix;
  for (std::int32_t t : share->end_tokens) {
    if (t < 0 || t >= matrix->ne[0]) continue;
    const std::size_t offset = static_cast<std::size_t>(t) * matrix->nb[0];
    ggml_tensor* column = ggml_view_2d(ctx, m, 1, n_rows, matrix->nb[1], offset);
    m = ggml_set_2d_inplace(ctx, m, ggml_add(ctx, column, share->mask), matrix->nb[1], offset);
  }
  return m;
}

void backend_apply(llama_sampler* smpl, ggml_context* ctx, ggml_cgraph*, llama_sampler_data* data) {
  const SeqSampler& s = me(smpl);
  DeviceGreedyShare* share = s.share;
  ggml_tensor* row = data->logits;
  ggml_tensor* matrix = row->view_src;
  const bool row_of_matrix = matrix != nullptr && ggml_n_dims(matrix) == 2 && row->ne[0] == matrix->ne[0] &&
                             ggml_nelements(row) == row->ne[0] && row->view_offs % matrix->nb[1] == 0;
  if (!row_of_matrix || share->per_row) {
    // A graph that cannot mask a row (llama.cpp's probe, another layout) leaves it to the host:
    // no token, and its logits row kept for the host's chain, which masks the ends. (The probe
    // counts a chain's nodes for llama.cpp's graph budget; the shared mask's 3 per end token and
    // the argmax, once per graph, are within the slack that budget keeps.)
    if (ignores_end(s)) return;
    // Not the layout this was written against (or asked for): an argmax of this row alone.
    ggml_tensor* best = ggml_argmax(ctx, ggml_reshape_1d(ctx, row, ggml_nelements(row)));
    data->sampled = ggml_view_1d(ctx, best, 1, 0);
    if (!share->copy_logits) data->logits = nullptr;
    return;
  }
  if (share->logits != matrix) {
    share->logits = matrix;
    share->argmax = ggml_argmax(ctx, share->end_tokens.empty() ? matrix : mask_ends(share, ctx, matrix));
    ggml_set_name(share->argmax, "uma_greedy_argmax");
    share->row_seq.assign(static_cast<std::size_t>(matrix->ne[1]), -1);
  }
  const std::size_t r = row->view_offs / matrix->nb[1];
  // A sequence with no output row in this graph gets row 0 (llama.cpp's inactive samplers), so
  // row 0's owner is known only when llama.cpp sets the inputs of the active ones.
  if (r == 0) {
    share->row0_claims.push_back(s.seq);
  } else {
    share->row_seq[r] = s.seq;
  }
  data->sampled = ggml_view_1d(ctx, share->argmax, 1, r * share->argmax->nb[0]);
  if (!share->copy_logits) data->logits = nullptr;
}

void backend_set_input(llama_sampler* smpl) {
  // Each row's amount from its owner's flag now (a reused graph keeps its rows' owners, not their
  // flags), written by the first active sampler of each run of the graph; the others only settle
  // row 0's owner (called in no set order) and rewrite its amount if that changes it.
  const SeqSampler& s = me(smpl);
  DeviceGreedyShare* share = s.share;
  if (share->mask == nullptr) return;
  const auto amount = [share](std::int32_t seq) {
    const bool ignore = seq >= 0 && static_cast<std::size_t>(seq) < share->ignore_end.size() && share->ignore_end[static_cast<std::size_t>(seq)] != 0;
    return ignore ? -INFINITY : 0.0f;
  };
  const bool owns_row0 = std::find(share->row0_claims.begin(), share->row0_claims.end(), s.seq) != share->row0_claims.end();
  if (owns_row0) share->row_seq[0] = s.seq;
  if (share->mask_written != share->decodes || share->decodes == 0) {
    share->mask_rows.resize(share->row_seq.size());
    for (std::size_t r = 0; r < share->row_seq.size(); ++r) share->mask_rows[r] = amount(share->row_seq[r]);
    ggml_backend_tensor_set(share->mask, share->mask_rows.data(), 0, share->mask_rows.size() * sizeof(float));
    share->mask_written = share->decodes;
  } else if (owns_row0 && share->mask_rows[0] != amount(s.seq)) {
    share->mask_rows[0] = amount(s.seq);
    ggml_backend_tensor_set(share->mask, share->mask_rows.data(), 0, sizeof(float));
  }
}

llama_sampler_i kIface = {
    /* .name              = */ name,
    /* .accept            = */ nullptr,
    /* .apply             = */ apply,
    /* .reset             = */ nullptr,
    /* .clone             = */ clone,
    /* .free              = */ free_ctx,
    /* .backend_init      = */ backend_init,
    /* .backend_accept    = */ nullptr,
    /* .backend_apply     = */ backend_apply,
    /* .backend_set_input = */ backend_set_input,
    /* .backend_reset     = */ backend_reset,
    /* .copy_state        = */ nullptr,
};

llama_sampler* clone(const llama_sampler* smpl) { return llama_sampler_init(&kIface, new SeqSampler(me(smpl))); }

}  // namespace

llama_sampler* make_device_greedy(DeviceGreedyShare* share, std::int32_t seq) {
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init(&kIface, new SeqSampler{share, seq}));
  return chain;
}

}  // namespace uma
