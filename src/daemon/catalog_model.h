// CatalogModel: umad's model when it comes from the cluster's catalog (--model-id) rather than a
// file: the catalog entry and manifest read from Redis (cluster/model_catalog.h), and the model
// store (store/tier_store.h) that fills its image from --store-dir or the catalog's URL, every
// chunk verified. LlamaRuntime then loads from that image (runtime/image_loader.h).
// Thread-safety: built and read on the main thread; the store runs its own loader thread.
// Lifetime: as long as the daemon (the store's images back the loaded model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/config.h"
#include "store/tier_store.h"

namespace uma {

class CatalogModel {
 public:
  // Reads the catalog and starts the fill; `rt->image` gets the image (it fills while llama.cpp
  // loads from it). kNotFound for an id the catalog does not have; kIo when Redis cannot be read.
  static Status open(const DaemonConfig& cfg, RuntimeConfig* rt, std::unique_ptr<CatalogModel>* out);
  std::uint64_t bytes() const { return manifest_->bytes; }
  // How the fill went, once the load is done: "4.11 GB from nvme in 2.59 s (1.59 GB/s), ..."
  std::string describe_fill() const;
  // The runtime has loaded the model: the store's hold on its image ends (the runtime keeps what
  // it maps; the DRAM tier keeps the image only within --store-dram-mb).
  void loaded() { store_->release(manifest_->id); }
  store::TierStore& store() { return *store_; }

 private:
  std::unique_ptr<store::TierStore> store_;
  std::shared_ptr<const store::Manifest> manifest_;
};

}  // namespace uma
