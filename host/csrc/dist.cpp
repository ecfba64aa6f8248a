// fe-host's shim over libtorch's c10d: a TCPStore rendezvous and a Gloo process group, with the
// few collectives data-parallel training needs. The implementation is libtorch's own (inside
// libtorch_cpu.so); only the declarations come from headers (c10d's from the wheel, gloo's from
// Debian's libgloo-dev, which ProcessGroupGloo.hpp includes). Every entry point catches
// exceptions and returns an error message (malloc'd, freed by the caller) or NULL, so a lost
// peer or a timeout becomes a Rust error, never an abort.

#include "dist.hpp"

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using fe_dist::Group;
using fe_dist::kBucketBytes;
using fe_dist::wait;

// Runs `collective` on flat buckets of `tensors` (same dtype and device within a bucket) on the
// group for their device, then copies the results back into the tensors in place.
template <typename Collective>
void bucketed(Group &group, at::Tensor **tensors, int count, Collective collective) {
    int start = 0;
    while (start < count) {
        auto dtype = tensors[start]->scalar_type();
        auto device = tensors[start]->device();
        int64_t bytes = 0;
        int end = start;
        while (end < count && tensors[end]->scalar_type() == dtype &&
               tensors[end]->device() == device &&
               (end == start || bytes + tensors[end]->nbytes() <= kBucketBytes)) {
            bytes += tensors[end]->nbytes();
            ++end;
        }
        std::vector<at::Tensor> parts;
        parts.reserve(end - start);
        for (int i = start; i < end; ++i) {
            parts.push_back(tensors[i]->detach().reshape({-1}));
        }
        std::vector<at::Tensor> flat{at::cat(parts)};
        wait(group, collective(backend_for(group, flat[0]), flat));
        int64_t offset = 0;
        for (int i = start; i < end; ++i) {
            auto n = tensors[i]->numel();
            tensors[i]->detach().copy_(flat[0].narrow(0, offset, n).view(tensors[i]->sizes()));
            offset += n;
        }
        start = end;
    }
}

// Every rank posts the world size it was started with, and compares it with rank 0's (rank 0
// with every other rank's): ranks started with different WORLD_SIZE values would otherwise
// wait for ranks that never come, and report the ones that did as lost. A rank that does not
// come makes the wait time out naming its key, which the host reads as "rank N did not join".
void check_world_sizes(c10d::Store &store, int rank, int world,
                       std::chrono::milliseconds timeout) {
    auto key = [](int r) { return "fe/world_size/" + std::to_string(r); };
    // Posted by a rank once it has read rank 0's size: rank 0, which hosts the store when
    // fe-host starts the ranks, keeps it up after a mismatch until the other rank has its
    // verdict (else that rank found the store gone and reported rank 0 lost).
    auto seen = [](int r) { return "fe/world_size_seen/" + std::to_string(r); };
    auto text = std::to_string(world);
    store.set(key(rank), std::vector<uint8_t>(text.begin(), text.end()));
    auto posted = [&](int r) {
        auto bytes = store.get(key(r));
        return std::string(bytes.begin(), bytes.end());
    };
    if (rank != 0) {
        store.wait({key(0)}, timeout);
        auto zero = posted(0);
        store.set(seen(rank), std::vector<uint8_t>{1});
        if (zero != text) {
            throw std::runtime_error("rank 0 was started with WORLD_SIZE=" + zero + ", this rank (" +
                                     std::to_string(rank) + ") with WORLD_SIZE=" + text +
                                     ": start every rank with the same WORLD_SIZE");
        }
        return;
    }
    // One rank at a time: a wait that times out names the one rank still missing, and every
    // rank that came is compared (rank 0 started with the larger size too).
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 1; r < world; ++r) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        store.wait({key(r)}, std::max(left, std::chrono::milliseconds(1)));
        auto theirs = posted(r);
        if (theirs != text) {
            try {
                store.wait({seen(r)}, std::min(std::max(left, std::chrono::milliseconds(1)),
                                               std::chrono::milliseconds(30000)));
            } catch (...) {
                // Rank r is gone or stuck: its verdict is its own business now.
            }
            throw std::runtime_error("rank " + std::to_string(r) + " was started with WORLD_SIZE=" +
                                     theirs + ", rank 0 with WORLD_SIZE=" + text +
                                     ": start every rank with the same WORLD_SIZE");
        }
    }
}

}  // namespace

extern "C" {

// Joins the group `rank` of `world` through the TCPStore at host:port. `is_server`: this rank
// hosts the store (rank 0 when nobody else does; under torchrun the agent already does).
// `device_mode`: 0 = bind gloo to `device_name` as an address, 1 = as an interface name,
// 2 = the default device (this host's resolved name, else loopback). `prefix` keeps the keys of
// separate attempts (elastic restarts) apart on a store that outlives them. `cuda_device` >= 0:
// this rank trains on that GPU and also joins an NCCL group for its CUDA tensors.
char *fe_dist_join(const char *host, int port, int rank, int world, bool is_server,
                   const char *prefix, int64_t timeout_ms, int device_mode,
                   const char *device_name, int cuda_device, void **out) {
    FE_DIST_GUARD({
        fe_dist::filter_logs();
        auto timeout = std::chrono::milliseconds(timeout_ms);
        c10d::TCPStoreOptions options;
        options.port = static_cast<std::uint16_t>(port);
        options.isServer = is_server;
        options.numWorkers = is_server ? std::optional<std::size_t>(world) : std::nullopt;
        options.waitWorkers = false;
        options.timeout = timeout;
        auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(host), options);
        auto store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), tcp);
        check_world_sizes(*store, rank, world, timeout);
        auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
        if (device_mode == 0) {
            gloo_options->devices.push_back(
                c10d::ProcessGroupGloo::createDeviceForHostname(device_name));
        } else if (device_mode == 1) {
            gloo_options->devices.push_back(
                c10d::ProcessGroupGloo::createDeviceForInterface(device_name));
        } else {
            gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
        }
        auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
        c10::intrusive_ptr<c10d::Backend> nccl;
        if (cuda_device >= 0) {
            nccl = fe_dist::make_nccl(store, rank, world, timeout, cuda_device);
        }
        *out = new Group{store, gloo, nccl, timeout};
    })
}

// Leaves the group. An NCCL group is aborted first: its destructor would abort it anyway, but
// warns that "destroy_process_group() was not called" (Python's way to leave) when nobody did.
// abort() does not block, also when a peer is gone; every collective was waited for already.
void fe_dist_free(void *handle) {
    auto *group = static_cast<Group *>(handle);
    if (group->nccl) {
        try {
            group->nccl->abort();
        } catch (...) {
        }
    }
    delete group;
}

// Sums (op 0), or takes the maximum (op 1) of, `tensors` across ranks, in place, in flat buckets.
char *fe_dist_all_reduce(void *handle, at::Tensor **tensors, int count, int op) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        c10d::AllreduceOptions options;
        options.reduceOp = op == 1 ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
        options.timeout = group.timeout;
        bucketed(group, tensors, count, [&](c10d::Backend &backend, std::vector<at::Tensor> &flat) {
            return backend.allreduce(flat, options);
        });
    })
}

// Overwrites `tensors` on every rank with rank `root`'s values, in flat buckets.
char *fe_dist_broadcast(void *handle, at::Tensor **tensors, int count, int root) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        c10d::BroadcastOptions options;
        options.rootRank = root;
        options.timeout = group.timeout;
        bucketed(group, tensors, count, [&](c10d::Backend &backend, std::vector<at::Tensor> &flat) {
            return backend.broadcast(flat, options);
        });
    })
}

// Every rank's `input` (same shape and dtype on all ranks), stacked along a new first dimension
// in rank order, written to `*out`.
char *fe_dist_all_gather(void *handle, at::Tensor *input, at::Tensor **out) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        auto world = group.gloo->getSize();
        auto local = input->detach().contiguous();
        std::vector<at::Tensor> outputs;
        outputs.reserve(world);
        for (int i = 0; i < world; ++i) {
            outputs.push_back(at::empty_like(local));
        }
        std::vector<std::vector<at::Tensor>> output_lists{outputs};
        std::vector<at::Tensor> inputs{local};
        c10d::AllgatherOptions options;
        options.timeout = group.timeout;
        wait(group, backend_for(group, local).allgather(output_lists, inputs, options));
        *out = new at::Tensor(at::stack(output_lists[0]));
    })
}

// Waits until every rank arrives. With `monitored`, rank 0 names the ranks that did not arrive
// within the timeout (gloo's monitored barrier) instead of a bare timeout.
char *fe_dist_barrier(void *handle, bool monitored) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        c10d::BarrierOptions options;
        options.timeout = group.timeout;
        if (monitored) {
            group.gloo->monitoredBarrier(options, false);
        } else {
            wait(group, group.gloo->barrier(options));
        }
    })
}

// A roll call after a failed collective, so the error can name the rank that is gone: this
// rank writes `fe_census/<rank>` to the store, then waits up to `wait_ms` for every other
// rank's key. Every live rank's collective fails when a peer dies, so every live rank answers;
// the ranks missing at the deadline (comma-separated in `*missing`, malloc'd) are the lost ones.
// Throws (an error comes back) when the store itself is unreachable: its host is lost.
char *fe_dist_census(void *handle, int64_t wait_ms, char **missing) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        auto rank = group.gloo->getRank();
        auto world = group.gloo->getSize();
        auto key = [](int r) { return "fe_census/" + std::to_string(r); };
        group.store->set(key(rank), std::vector<uint8_t>{1});
        std::vector<bool> seen(world, false);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
        while (true) {
            bool all = true;
            for (int r = 0; r < world; ++r) {
                if (!seen[r]) {
                    seen[r] = group.store->check({key(r)});
                    all = all && seen[r];
                }
            }
            if (all || std::chrono::steady_clock::now() >= deadline) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        std::string list;
        for (int r = 0; r < world; ++r) {
            if (!seen[r]) {
                list += (list.empty() ? "" : ",") + std::to_string(r);
            }
        }
        *missing = static_cast<char *>(std::malloc(list.size() + 1));
        if (*missing != nullptr) {
            std::memcpy(*missing, list.c_str(), list.size() + 1);
        }
    })
}

// A rank that failed by itself leaves its error on the store (`fe_failed/<rank>`) before it
// leaves the group, so that the ranks its departure stops can say why they stopped.
char *fe_dist_post_failure(void *handle, const char *message) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        std::string text(message);
        auto rank = std::to_string(group.gloo->getRank());
        group.store->set("fe_failed/" + rank, std::vector<uint8_t>(text.begin(), text.end()));
        group.store->set("fe_verdict/" + rank, std::vector<uint8_t>{1});
    })
}

// A rank that knows how the run ended for it (it read a posted failure, posted its own, or
// finished) says so (`fe_verdict/<rank>`): the store's host waits for that before leaving.
char *fe_dist_have_verdict(void *handle) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        auto key = "fe_verdict/" + std::to_string(group.gloo->getRank());
        group.store->set(key, std::vector<uint8_t>{1});
    })
}

// The store's host (rank 0 under `run --nproc`) that failed by itself would take the store, and
// the failure it posted, down with it when it exits: its peers, whose collectives fail only when
// it leaves them, would then find no store and call it lost. So it leaves the collectives first
// (destroying its backends closes their connections: a peer's wait fails at once), answers the
// peers' roll call, and keeps the store up until every other rank has its verdict
// (`fe_verdict/<rank>`), at most `wait_ms`. Only the store is left for fe_dist_free.
char *fe_dist_linger(void *handle, int64_t wait_ms) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        auto rank = group.gloo->getRank();
        auto world = group.gloo->getSize();
        if (group.nccl) {
            try {
                group.nccl->abort();
            } catch (...) {
            }
            group.nccl.reset();
        }
        group.gloo.reset();
        group.store->set("fe_census/" + std::to_string(rank), std::vector<uint8_t>{1});
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
        std::vector<bool> seen(world, false);
        seen[rank] = true;
        while (true) {
            bool all = true;
            for (int r = 0; r < world; ++r) {
                if (!seen[r]) {
                    seen[r] = group.store->check({"fe_verdict/" + std::to_string(r)});
                    all = all && seen[r];
                }
            }
            if (all || std::chrono::steady_clock::now() >= deadline) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    })
}

// The error rank `rank` left on the store (`*message`, malloc'd), or NULL when it left none.
char *fe_dist_posted_failure(void *handle, int rank, char **message) {
    FE_DIST_GUARD({
        auto &group = *static_cast<Group *>(handle);
        auto key = "fe_failed/" + std::to_string(rank);
        *message = nullptr;
        if (group.store->check({key})) {
            auto bytes = group.store->get(key);
            auto me = "fe_verdict/" + std::to_string(group.gloo->getRank());
            group.store->set(me, std::vector<uint8_t>{1});
            *message = static_cast<char *>(std::malloc(bytes.size() + 1));
            if (*message != nullptr) {
                std::memcpy(*message, bytes.data(), bytes.size());
                (*message)[bytes.size()] = '\0';
            }
        }
    })
}

}  // extern "C"
