// The emulated neuron device's C++ pieces: what the emulation cannot provide from Python.
//
// - A device guard. PyTorch's Python device guard (torch._C._acc.DeviceGuard, torch 2.13) reports device 0
//   as current and a device count of 1 to C++, so a bare "neuron" resolved in C++ (Tensor.to("neuron"),
//   Module.to) lands on core 0 whatever torch.neuron.set_device said, torch.accelerator.device_count() is 1,
//   and autograd has a backward thread for core 0 only. This guard keeps the current core (per thread, as
//   CUDA's does) and the emulated core count, both set from Python through the C functions at the bottom
//   (ctypes); streams and events are no-ops, as in the rest of the emulation.
// - An allocator. No allocator is registered for PrivateUse1 otherwise, so C++ that allocates a storage
//   directly (torch.UntypedStorage(n, device="neuron"), torch.load onto the device) would dereference a
//   null allocator. This one hands out host memory tagged with the current core.
// - PrivateUse1 hooks, in place of the Python ones: the same answers (available, built), plus resizing a
//   storage in place (UntypedStorage.resize_, which FSDP2 uses to free and regrow parameters).
// It includes c10 headers and one ATen header, and needs neither Python's headers nor pybind11.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace {

std::atomic<int> device_count{1};
thread_local int current = 0;

struct NeuronGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(current));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() < device_count.load(), "neuron:", static_cast<int>(d.index()),
                ": this process emulates ", device_count.load(), " NeuronCore(s)");
    if (d.index() >= 0) current = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) current = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    (void)priority;
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count.load());
  }
  // every op has finished when it returns: events are always complete, streams always idle
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

NeuronGuard guard;

void free_host(void* data) { c10::free_cpu(data); }

struct NeuronAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &free_host,
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(current))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

NeuronAllocator allocator;

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count.load()); }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(current));
  }
  // A new block of host memory holding the old bytes (as many as fit); the old block is released by its
  // own deleter (a DLPack capsule's for storages the Python fallback made, free for the allocator's).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    c10::DataPtr fresh = allocator.allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0) std::memcpy(fresh.get(), impl->data(), keep);
    c10::Device device = impl->data_ptr().device();
    fresh.unsafe_set_device(device);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

NeuronHooks* hooks = nullptr;

}  // namespace

extern "C" {
// Registers the guard and the allocator for PrivateUse1 (replacing any registered guard); call before the
// first neuron tensor.
void nkihub_neuron_guard_install(int count) {
  device_count.store(count);
  c10::impl::registerDeviceGuard(c10::DeviceType::PrivateUse1, &guard);
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
}
// Registers the hooks; PrivateUse1 takes one set of hooks per process, so call it instead of registering
// the Python ones (returns 0 when some were registered already).
int nkihub_neuron_hooks_install() {
  if (at::isPrivateUse1HooksRegistered()) return 0;
  hooks = new NeuronHooks();
  at::RegisterPrivateUse1HooksInterface(hooks);
  return 1;
}
void nkihub_neuron_guard_set_count(int count) { device_count.store(count); }
void nkihub_neuron_guard_set_current(int index) { current = index; }
int nkihub_neuron_guard_current() { return current; }
}
