#include "daemon/catalog_model.h"

#include <cstdio>

#include "cluster/model_catalog.h"
#include "runtime/image_loader.h"

namespace uma {

Status CatalogModel::open(const DaemonConfig& cfg, RuntimeConfig* rt, std::unique_ptr<CatalogModel>* out) {
  cluster::RedisAddress addr;
  if (Status s = cfg.redis.resolve(&addr); !s.ok()) return s;
  cluster::RedisClient redis(addr, std::chrono::milliseconds(2000));
  cluster::CatalogModel entry;
  std::unique_ptr<CatalogModel> m(new CatalogModel());
  if (Status s = cluster::catalog_get(redis, cfg.model_id, &entry, &m->manifest_); !s.ok()) {
    return {s.code(), "--model-id " + cfg.model_id + ": " + s.message()};
  }
  store::TierConfig tc;
  tc.nvme_dir = cfg.store_dir;
  tc.nvme_bytes = cfg.store_nvme_bytes;
  tc.dram_bytes = cfg.store_dram_bytes;
  tc.alloc = host_allocator_for_backend();
  m->store_ = std::make_unique<store::TierStore>(std::move(tc));
  Status s;
  rt->image = m->store_->acquire({m->manifest_, entry.url}, &s);
  if (!rt->image) return s;
  *out = std::move(m);
  return {};
}

std::string CatalogModel::describe_fill() const {
  for (const store::FillRecord& r : store_->history()) {
    if (r.id != manifest_->id) continue;
    char line[256];
    std::snprintf(line, sizeof line, "%.2f GB from %s in %.2f s (%.2f GB/s), %llu corrupt chunks fetched again%s%s",
                  r.bytes / 1e9, std::string(store::tier_name(r.from)).c_str(), r.seconds, r.bytes / r.seconds / 1e9,
                  static_cast<unsigned long long>(r.corrupt_chunks), r.direct ? "" : ", page cache (no O_DIRECT here)",
                  r.io_uring ? "" : ", pread (io_uring refused here)");
    return line;
  }
  return "still filling";
}

}  // namespace uma
