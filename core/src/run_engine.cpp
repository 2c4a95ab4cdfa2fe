// The run layer's requests as the engine takes them (run.h, engine_request).
#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include "run_internal.h"

namespace sonde {

EngineRequest engine_request(const RunModel& m, const Request& r, const RunOptions& o, std::int64_t index) {
  const run_detail::PreparedRequest p = run_detail::prepare_one(m, r, index, o);
  EngineRequest q;
  q.id = p.id;
  q.prompt = p.ids;
  if (m.info().decoding == DecodingKind::MaskedDiffusion) {
    q.diffusion = resolve_diffusion(p.settings, m.config(), m.info());
    q.diffusion.seeds = {p.seed};
  } else {
    q.ar = resolve_autoregressive(p.settings, m.config(), m.tokenizer());
    q.ar.seeds = {p.seed};
    q.ar.use_cache = o.use_kv_cache;
  }
  return q;
}

}  // namespace sonde
