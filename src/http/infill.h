// llama-server's /infill (fill in the middle, for code editors): `input_prefix`, `input_suffix`
// (text, or token ids and text mixed), optional `input_extra` ([{"filename", "text"}]: other
// files, as repo-level context) and `prompt` (text after the prefix), and every /completion field.
// The prompt is built as llama-server builds it (tools/server format_prompt_infill), from the
// model's FIM tokens:
//   [FIM_REP]myproject\n [FIM_SEP]filename\n text ... [FIM_SEP]filename\n
//   [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
// the prefix cut to its last 3/4 of n_batch tokens, the suffix to what is left of a quarter, the
// extra context to the room n_ctx - n_batch - 2 * n_predict leaves (its newest tokens kept). A
// model without FIM_PRE, FIM_SUF and FIM_MID answers 501 naming what is missing.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "http/http_router.h"

namespace uma::http_route {

// The /completion body that runs `body`'s infill: its fields less the infill ones, with `prompt`
// the built token ids. Needs ctx.tokenize and ctx.facts.
Status infill_body(std::string_view body, const Context& ctx, std::string* out);

}  // namespace uma::http_route
