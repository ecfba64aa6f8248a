// Gradients all-reduced while backward still runs, as DDP's Reducer does. A hook on every
// trainable parameter copies its gradient into a flat bucket the moment autograd computes it
// (and hands autograd that bucket slot as the gradient), and a bucket whose gradients are all in
// is all-reduced (Gloo's own threads for CPU parameters, NCCL's stream for CUDA ones) while
// backward goes on to earlier layers. Buckets go out in one fixed order on every rank, because
// Gloo and NCCL match the ranks' collectives by their order: a bucket whose gradients are in
// waits for the buckets before it. The last bucket is held until backward ends; it also carries a
// few numbers the ranks agree on (see src/dist/overlap.rs).
//
// CUDA parameters, by c10d's stream rules as DDP's Reducer relies on them: their hooks run on
// autograd's thread for the device, whose current stream is the one backward computed the
// gradient on, so the copy into the bucket is queued on that stream; ProcessGroupNCCL makes its
// own stream wait for the caller's current stream before the all-reduce (so it sees every copy
// queued before the launch) and keeps the bucket's memory alive until it is done; waiting for
// the work makes the waiting thread's current stream wait for NCCL's.
//
// The hooks act only while armed (around the backward pass of an update that averages its
// gradients); any other backward through the same parameters passes through untouched.
//
// Buckets are first cut from the parameters in reverse, which is the order backward computes
// them in for a chain of layers declared in order. After the first armed backward they are cut
// again in the order the gradients really arrived, as DDP's Reducer rebuilds its buckets after
// its first iteration, so that a model whose parameters are declared in another order than it
// uses them (a head declared first, a branch) still fills its first bucket first. Every rank
// takes rank 0's order (a broadcast), since the ranks' buckets must match.

#include "dist.hpp"

#include <memory>
#include <stdexcept>
#include <vector>

namespace {

using fe_dist::Group;

struct Bucket {
    // Indices into Overlap::params, in the order their gradients are expected (reverse).
    std::vector<int> params;
    at::ScalarType dtype;
    // Elements of its gradients; the last bucket has `Overlap::extra` more after them.
    int64_t numel = 0;
    // This backward's flat buffer and how many of its gradients are still to come.
    at::Tensor flat;
    size_t missing = 0;
};

struct Overlap;
void plan(Overlap &overlap, const std::vector<size_t> &order);

struct Overlap {
    // The group for the parameters' device: Gloo's, or NCCL's for CUDA parameters.
    c10::intrusive_ptr<c10d::Backend> backend;
    std::chrono::milliseconds timeout;
    std::vector<at::Tensor> params;
    std::vector<unsigned> hooks;
    std::vector<Bucket> buckets;
    std::vector<size_t> bucket_of;
    std::vector<int64_t> offset_of;
    int64_t extra = 0;
    int64_t first_cap = 0;
    int64_t cap = 0;
    // Whether the buckets follow the order of arrival yet, and, until they do, that order.
    bool rebuilt = false;
    std::vector<size_t> arrival;

    // One backward's state.
    bool armed = false;
    std::vector<bool> ready;
    size_t launched = 0;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;

    at::Tensor slot(size_t i) const {
        const auto &param = params[i];
        return buckets[bucket_of[i]].flat.narrow(0, offset_of[i], param.numel()).view(
            param.sizes());
    }

    void launch_next() {
        std::vector<at::Tensor> tensors{buckets[launched].flat};
        c10d::AllreduceOptions options;
        options.reduceOp = c10d::ReduceOp::SUM;
        options.timeout = timeout;
        works.push_back(backend->allreduce(tensors, options));
        ++launched;
    }

    // Every bucket but the last whose gradients are all in, in order.
    void launch_ready() {
        while (launched + 1 < buckets.size() && buckets[launched].missing == 0) {
            launch_next();
        }
    }

    void arm() {
        for (auto &bucket : buckets) {
            auto extra_here = &bucket == &buckets.back() ? extra : 0;
            bucket.flat = at::empty({bucket.numel + extra_here},
                                    params[bucket.params.front()].options().dtype(bucket.dtype));
            bucket.missing = bucket.params.size();
        }
        ready.assign(params.size(), false);
        launched = 0;
        works.clear();
        arrival.clear();
        armed = true;
    }

    at::Tensor on_gradient(size_t i, const at::Tensor &grad) {
        if (!armed) {
            return grad;
        }
        if (ready[i]) {
            throw std::runtime_error("a parameter's gradient arrived twice in one backward pass");
        }
        auto into = slot(i);
        into.copy_(grad);
        ready[i] = true;
        if (!rebuilt) {
            arrival.push_back(i);
        }
        --buckets[bucket_of[i]].missing;
        launch_ready();
        return into;
    }

    // Zeros for the gradients backward never computed (parameters this rank's forward did not
    // use: every rank must still send the same buckets), the extra numbers into the last bucket,
    // the rest of the buckets out, every bucket waited for, and the sums divided by the world
    // size. `extra_out` gets the extra numbers' sums (before the division).
    void finish(const float *extra_in, float *extra_out, at::Tensor **grads_out) {
        armed = false;
        for (size_t i = 0; i < params.size(); ++i) {
            if (!ready[i]) {
                slot(i).zero_();
                ready[i] = true;
                --buckets[bucket_of[i]].missing;
            }
        }
        launch_ready();
        auto &last = buckets.back();
        auto tail = last.flat.narrow(0, last.numel, extra);
        tail.copy_(at::from_blob(const_cast<float *>(extra_in), {extra}, at::kFloat));
        launch_next();
        for (const auto &work : works) {
            fe_dist::wait_work(work, timeout);
        }
        works.clear();
        auto sums = tail.to(at::kCPU, at::kFloat).contiguous();
        std::memcpy(extra_out, sums.data_ptr<float>(), extra * sizeof(float));
        auto world = static_cast<double>(backend->getSize());
        for (auto &bucket : buckets) {
            bucket.flat.div_(world);
        }
        for (size_t i = 0; i < params.size(); ++i) {
            grads_out[i] = new at::Tensor(slot(i));
        }
        // The gradients handed out keep the old buckets' memory alive; the next arm allocates.
        if (!rebuilt) {
            rebuild();
        }
    }

    // Cuts the buckets again in rank 0's order of arrival, parameters backward did not reach
    // last (in reverse, as before). Every rank calls it after its first armed backward, so the
    // broadcast is at the same point of every rank's sequence.
    void rebuild() {
        std::vector<int64_t> order(arrival.begin(), arrival.end());
        std::vector<bool> arrived(params.size(), false);
        for (auto i : arrival) {
            arrived[i] = true;
        }
        for (size_t k = params.size(); k-- > 0;) {
            if (!arrived[k]) {
                order.push_back(static_cast<int64_t>(k));
            }
        }
        auto device = params.front().device();
        std::vector<at::Tensor> tensors{at::tensor(order, at::kLong).to(device)};
        c10d::BroadcastOptions options;
        options.rootRank = 0;
        options.timeout = timeout;
        fe_dist::wait_work(backend->broadcast(tensors, options), timeout);
        auto agreed = tensors[0].to(at::kCPU).contiguous();
        const auto *values = agreed.data_ptr<int64_t>();
        std::vector<size_t> rank_zeros;
        std::vector<bool> seen(params.size(), false);
        for (size_t k = 0; k < params.size(); ++k) {
            auto i = values[k];
            if (i < 0 || static_cast<size_t>(i) >= params.size() || seen[i]) {
                throw std::runtime_error(
                    "rank 0's order of gradient arrival is not an order of this rank's parameters "
                    "(do the ranks train the same model?)");
            }
            seen[i] = true;
            rank_zeros.push_back(static_cast<size_t>(i));
        }
        buckets.clear();
        plan(*this, rank_zeros);
        arrival.clear();
        arrival.shrink_to_fit();
        rebuilt = true;
    }
};

// Parameters in `order` (the order backward is expected to produce their gradients), cut into
// buckets of one dtype and at most `first_cap` bytes for the first, `cap` for the others: a
// small first bucket starts communication early, as DDP's first_bucket_bytes_cap does.
void plan(Overlap &overlap, const std::vector<size_t> &order) {
    auto count = overlap.params.size();
    overlap.bucket_of.assign(count, 0);
    overlap.offset_of.assign(count, 0);
    int64_t bytes = 0;
    for (auto i : order) {
        const auto &param = overlap.params[i];
        auto limit = overlap.buckets.size() <= 1 ? overlap.first_cap : overlap.cap;
        auto fits = !overlap.buckets.empty() && overlap.buckets.back().dtype == param.scalar_type() &&
                    bytes + static_cast<int64_t>(param.nbytes()) <= limit;
        if (!fits) {
            overlap.buckets.push_back(Bucket{{}, param.scalar_type()});
            bytes = 0;
        }
        auto &bucket = overlap.buckets.back();
        overlap.bucket_of[i] = overlap.buckets.size() - 1;
        overlap.offset_of[i] = bucket.numel;
        bucket.params.push_back(static_cast<int>(i));
        bucket.numel += param.numel();
        bytes += static_cast<int64_t>(param.nbytes());
    }
}

Overlap &get(void *handle) { return **static_cast<std::shared_ptr<Overlap> *>(handle); }

}  // namespace

extern "C" {

// Hooks `params` (trainable, all on one device: the CPU, or this rank's GPU) of a rank of `group` for overlapped all-reduce in
// buckets of at most `first_cap_bytes` (the first) and `cap_bytes` bytes, the last carrying
// `extra` more numbers. `*buckets` gets how many buckets that made.
char *fe_dist_overlap_new(void *group, at::Tensor **params, int count, int64_t first_cap_bytes,
                          int64_t cap_bytes, int extra, void **out, int *buckets) {
    FE_DIST_GUARD({
        if (count <= 0) {
            throw std::invalid_argument("no parameters to all-reduce");
        }
        const auto &membership = *static_cast<Group *>(group);
        auto device = params[0]->device();
        for (int i = 1; i < count; ++i) {
            if (params[i]->device() != device) {
                throw std::invalid_argument("parameters on more than one device");
            }
        }
        auto overlap = std::make_shared<Overlap>();
        if (device.is_cuda()) {
            if (!membership.nccl) {
                throw std::runtime_error("CUDA parameters on a rank without NCCL");
            }
            overlap->backend = membership.nccl;
        } else {
            overlap->backend = membership.gloo;
        }
        overlap->timeout = membership.timeout;
        overlap->extra = extra;
        overlap->first_cap = first_cap_bytes;
        overlap->cap = cap_bytes;
        std::vector<size_t> reverse;
        for (int i = 0; i < count; ++i) {
            overlap->params.push_back(*params[i]);
            reverse.push_back(static_cast<size_t>(count - 1 - i));
        }
        plan(*overlap, reverse);
        std::weak_ptr<Overlap> weak = overlap;
        for (int i = 0; i < count; ++i) {
            // Weak: the parameters outlive the overlap, and their hooks must not keep it alive.
            overlap->hooks.push_back(overlap->params[i].register_hook(
                [weak, i](const at::Tensor &grad) -> at::Tensor {
                    auto strong = weak.lock();
                    return strong ? strong->on_gradient(static_cast<size_t>(i), grad) : grad;
                }));
        }
        *buckets = static_cast<int>(overlap->buckets.size());
        *out = new std::shared_ptr<Overlap>(std::move(overlap));
    })
}

// Arms the hooks for the next backward pass.
char *fe_dist_overlap_arm(void *handle) { FE_DIST_GUARD(get(handle).arm()) }

// Ends an armed backward pass: see Overlap::finish. `grads_out` gets one new tensor per
// parameter (the averaged gradients, in parameter order).
char *fe_dist_overlap_finish(void *handle, const float *extra_in, float *extra_out,
                             at::Tensor **grads_out) {
    FE_DIST_GUARD(get(handle).finish(extra_in, extra_out, grads_out))
}

// The buckets as they stand: `params_out` gets the parameter indices bucket by bucket (one
// slot per parameter), `ends_out` where each bucket ends in it (one slot per parameter, at
// most), `*buckets` how many buckets there are.
char *fe_dist_overlap_layout(void *handle, int *params_out, int *ends_out, int *buckets) {
    FE_DIST_GUARD({
        const auto &overlap = get(handle);
        int at = 0;
        for (size_t b = 0; b < overlap.buckets.size(); ++b) {
            for (auto i : overlap.buckets[b].params) {
                params_out[at++] = i;
            }
            ends_out[b] = at;
        }
        *buckets = static_cast<int>(overlap.buckets.size());
    })
}

// Disarms after a backward pass that failed (the run is ending; buckets already sent are left).
void fe_dist_overlap_disarm(void *handle) {
    auto &overlap = get(handle);
    overlap.armed = false;
    overlap.works.clear();
}

void fe_dist_overlap_free(void *handle) {
    auto *shared = static_cast<std::shared_ptr<Overlap> *>(handle);
    auto &overlap = **shared;
    for (size_t i = 0; i < overlap.hooks.size(); ++i) {
        try {
            overlap.params[i].remove_hook(overlap.hooks[i]);
        } catch (...) {
            // A parameter whose autograd state is gone has no hook left to remove.
        }
    }
    delete shared;
}

}  // extern "C"
