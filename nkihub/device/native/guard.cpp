// The emulated neuron device's C++ device guard: the one piece of the emulation Python cannot provide.
//
// PyTorch's Python device guard (torch._C._acc.DeviceGuard, torch 2.13) reports device 0 as current and a
// device count of 1 to C++, so a bare "neuron" resolved in C++ (Tensor.to("neuron"), Module.to) lands on
// core 0 whatever torch.neuron.set_device said, and torch.accelerator.device_count() is 1. This guard keeps
// the current core (per thread, as CUDA's does) and the emulated core count, both set from Python through
// the C functions at the bottom (ctypes); streams and events are no-ops, as in the rest of the emulation.
// It includes only c10 headers and needs neither Python's headers nor pybind11.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>

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

}  // namespace

extern "C" {
// Registers the guard for PrivateUse1 (replacing any registered one); call before the first neuron tensor.
void nkihub_neuron_guard_install(int count) {
  device_count.store(count);
  c10::impl::registerDeviceGuard(c10::DeviceType::PrivateUse1, &guard);
}
void nkihub_neuron_guard_set_count(int count) { device_count.store(count); }
void nkihub_neuron_guard_set_current(int index) { current = index; }
int nkihub_neuron_guard_current() { return current; }
}
