// Loading a llama.cpp model from a store::ModelImage while the image is still being filled.
//
// llama.cpp reads the model's metadata through a FILE* that is the image: a stdio stream whose
// reads wait for just the chunks they cover. So llama.cpp's own loader runs unchanged (every
// architecture, tied and optional tensors as it decides) while the tier reader keeps filling later
// chunks: copying tensor k overlaps reading tensor k+1, and a cold start costs about
// max(read, copy), not their sum. Only verified bytes are ever handed to llama.cpp.
// - kCopy (a GPU's default): llama.cpp copies each tensor straight out of the image once its
//   chunks are ready (llama_model_load_from_file_ptr_and_data, our patch to the pinned source,
//   deps/llama-patches/). The image is registered page-locked memory, so the copy to the GPU is
//   DMA at the link's speed; llama.cpp's own reads went through four 1 MiB staging buffers and a
//   memcpy each (4.7 of 55 GB/s).
// - kStream: llama.cpp reads the tensors through the FILE* as well (its unpatched entry point).
//
// On the CPU there is a better way when the image lives in a memfd (store::allocate_shared, the
// default): once the image is complete, llama.cpp maps the memfd itself (its mmap path through a
// FILE* of it), so the weights are used where the tier put them: no copy and no second
// allocation, which on a CPU cost more than the read (a fresh 1.2 GB buffer's page faults took
// 0.6-1.2 s). kAuto maps on the CPU and copies when layers go to a GPU.
//
// (llama_model_init_from_user, the pin's other entry point, cannot load a real checkpoint: it
// creates every optional tensor an architecture knows, biases and rope factors included, and asks
// for their data.)
// Thread-safety: call from one thread; the image may be filled from others meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "store/model_image.h"

struct llama_model;
struct llama_model_params;

namespace uma {

struct ImageLoadStats {
  double seconds = 0;       // the whole load
  double wait_seconds = 0;  // of which waiting for chunks still being read or verified
  double copy_seconds = 0;  // of which copying bytes out of the image into llama.cpp's buffers
  std::uint64_t bytes_read = 0;
  int path = 0;  // the ImageLoadPath taken
  double register_seconds = 0;  // a file in host memory: pinning its pages (part of seconds)
  bool pinned_ahead = false;      // a standby had pinned the file (runtime/host_pins.h)
  // The copy path: from llama.cpp's first ask for a tensor's bytes to the load's end (the weights'
  // copy, llama.cpp's metadata, vocabulary and allocations before it left out), and those bytes.
  double tensor_seconds = 0;
  std::uint64_t tensor_bytes = 0;
};

enum class ImageLoadPath { kAuto, kStream, kMap, kCopy };

// kMap: the model uses the image's pages for as long as it lives, so the caller must hold the
// image until llama_model_free (else its block goes back to the pool and the next image
// overwrites weights in use). kStream, kCopy: the image may go once this returns.
llama_model* load_model_from_image(const std::shared_ptr<store::ModelImage>& image, const llama_model_params& params,
                                   Status* status, ImageLoadStats* stats = nullptr,
                                   ImageLoadPath path = ImageLoadPath::kAuto);

// A model file whose pages are already in host memory (tmpfs or a memfd: the agent hands a umad
// its DRAM tier's image so) loaded onto a GPU: mapped, registered with the GPU backend as pinned
// for the load and copied from by the copy path above, instead of llama.cpp's upload of its mapping, which copies pageable memory
// (0.94 against 0.18 s for an 8B in one process). Returns nullptr with
// *status set when the load failed; *handled is false (and nothing was done) when the file is not
// in host memory or there is no GPU that can pin it, and the caller loads it as any file.
llama_model* load_model_from_host_file(const std::string& path, const llama_model_params& params, bool* handled,
                                       Status* status, ImageLoadStats* stats = nullptr);

// Host memory for model images: a memfd (store::allocate_shared), registered with the first GPU
// backend as pinned (page-locked, DMA-able: cudaHostRegister under CUDA) when llama.cpp was built
// with one that can; else the backend's own pinned host buffers; on a CPU, the memfd as it is.
store::HostAllocator host_allocator_for_backend();
// True when the allocator above hands out pinned memory.
bool backend_has_pinned_host_memory();
// The first GPU backend's own page-locked host buffers (cudaMallocHost under CUDA), which a
// device-to-host copy may write (ggml registers an image's memfd read-only: a KV snapshot copied
// into it failed with "invalid argument"). Empty without such a backend.
store::HostAllocator page_locked_allocator();

}  // namespace uma
