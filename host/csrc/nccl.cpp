// The NCCL process group data-parallel ranks on CUDA use for their CUDA tensors (gradients,
// weights, buffers); everything on the CPU (stop agreement, metric states, barriers) stays on
// the Gloo group. libtorch_cuda.so carries the implementation; this file only constructs it.
// Compiled with USE_C10D_NCCL when the build found CUDA's and NCCL's headers (build.rs), and as
// a refusal otherwise.
//
// Stream semantics (c10d's): a collective's NCCL stream first waits for the current stream, so
// the kernels that produced its input are done; `wait()` makes the current stream wait for the
// NCCL stream, so later kernels see the result. With blocking wait (set below) `wait()` also
// blocks the calling thread until the collective ends or times out, which turns a lost rank into
// an exception in that thread — one line naming it, as with Gloo — instead of the watchdog
// taking the process down.

#include "dist.hpp"

#include <cstdlib>
#include <stdexcept>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace fe_dist {

bool nccl_built() {
#ifdef USE_C10D_NCCL
    return true;
#else
    return false;
#endif
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store> &store,
                                            int rank, int world,
                                            std::chrono::milliseconds timeout, int device) {
#ifdef USE_C10D_NCCL
    // A user's own settings win (overwrite = 0).
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
    // CleanUpOnly: on an error the watchdog aborts the communicators but leaves the process
    // alive, so the waiting thread's exception reaches fe-host's error path.
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
    auto index = static_cast<c10::DeviceIndex>(device);
    c10::cuda::set_device(index);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    // Its own key space on the shared store, apart from Gloo's.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, world, options);
    // Connects now, so that a rank that cannot reach the others fails the join, not step 1.
    nccl->eagerConnectSingleDevice(at::Device(at::kCUDA, index));
    return nccl;
#else
    (void)store, (void)rank, (void)world, (void)timeout, (void)device;
    throw std::runtime_error(
        "this fe-host was built without NCCL (CUDA's or NCCL's headers were missing when it was "
        "built; scripts/env.sh installs them): data-parallel ranks can train on the CPU only");
#endif
}

}  // namespace fe_dist

extern "C" {

// Whether this build can make NCCL groups.
bool fe_dist_nccl_built() { return fe_dist::nccl_built(); }

}  // extern "C"
