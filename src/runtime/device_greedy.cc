#include "runtime/device_greedy.h"

#include <ggml.h>
#include <llama.h>

namespace uma {
namespace {

const char* name(const llama_sampler*) { return "uma-device-greedy"; }

void apply(llama_sampler*, llama_token_data_array* cur_p) {
  // The host's greedy: the first largest logit (llama_sampler_init_greedy's rule).
  cur_p->selected = 0;
  for (size_t i = 1; i < cur_p->size; ++i) {
    if (cur_p->data[i].logit > cur_p->data[cur_p->selected].logit) cur_p->selected = static_cast<int64_t>(i);
  }
}

llama_sampler* clone(const llama_sampler* smpl);
void free_nothing(llama_sampler*) {}  // the share belongs to the runtime

bool backend_init(llama_sampler*, ggml_backend_buffer_type_t, uint32_t) { return true; }  // argmax runs everywhere

void backend_reset(llama_sampler* smpl) {
  // Called for every sampler before any builds into a new graph: forget the last graph's tensors.
  auto* share = static_cast<DeviceGreedyShare*>(smpl->ctx);
  share->logits = nullptr;
  share->argmax = nullptr;
}

void backend_apply(llama_sampler* smpl, ggml_context* ctx, ggml_cgraph*, llama_sampler_data* data) {
  auto* share = static_cast<DeviceGreedyShare*>(smpl->ctx);
  ggml_tensor* row = data->logits;
  ggml_tensor* matrix = row->view_src;
  const bool row_of_matrix = matrix != nullptr && ggml_n_dims(matrix) == 2 && row->ne[0] == matrix->ne[0] &&
                             ggml_nelements(row) == row->ne[0] && row->view_offs % matrix->nb[1] == 0;
  if (!row_of_matrix || share->per_row) {
    // Not the layout this was written against: an argmax of this row alone (still correct).
    ggml_tensor* best = ggml_argmax(ctx, ggml_reshape_1d(ctx, row, ggml_nelements(row)));
    data->sampled = ggml_view_1d(ctx, best, 1, 0);
    return;
  }
  if (share->logits != matrix) {
    share->logits = matrix;
    share->argmax = ggml_argmax(ctx, matrix);
    ggml_set_name(share->argmax, "uma_greedy_argmax");
  }
  const size_t r = row->view_offs / matrix->nb[1];
  data->sampled = ggml_view_1d(ctx, share->argmax, 1, r * share->argmax->nb[0]);
}

llama_sampler_i kIface = {
    /* .name              = */ name,
    /* .accept            = */ nullptr,
    /* .apply             = */ apply,
    /* .reset             = */ nullptr,
    /* .clone             = */ clone,
    /* .free              = */ free_nothing,
    /* .backend_init      = */ backend_init,
    /* .backend_accept    = */ nullptr,
    /* .backend_apply     = */ backend_apply,
    /* .backend_set_input = */ nullptr,
    /* .backend_reset     = */ backend_reset,
    /* .copy_state        = */ nullptr,
};

llama_sampler* clone(const llama_sampler* smpl) { return llama_sampler_init(&kIface, smpl->ctx); }

}  // namespace

llama_sampler* make_device_greedy(DeviceGreedyShare* share) {
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init(&kIface, share));
  return chain;
}

}  // namespace uma
