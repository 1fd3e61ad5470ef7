// SPDX-License-Identifier: Apache-2.0
//
// device.h in a build without CUDA (no nvcc at configure time, or
// -Dcuda=disabled): there is no GPU to use, and every call that would need
// one says so.
#include "daemon/gpu/device.h"
#include "daemon/gpu/imported.h"

namespace gsync::gpu {

namespace {
const char* const kWhy =
    "no GPU: gsync was built without CUDA (meson found no nvcc; tools/build.sh looks in "
    "/usr/local/cuda/bin)";

Status none() { return Status(GSYNC_ERR_UNSUPPORTED, kWhy); }
}  // namespace

bool built_with_cuda() { return false; }

const Devices& devices() {
  static const Devices d{0, kWhy};
  return d;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::release() {}
Status DeviceBuffer::allocate(int, size_t, DeviceBuffer*) { return none(); }

Status PinnedBuffer::allocate(int, size_t, std::unique_ptr<PinnedBuffer>*) { return none(); }
PinnedBuffer::~PinnedBuffer() = default;
bool can_access_peer(int, int) { return false; }
Status use_device(int) { return none(); }
Status copy_sync(void*, const void*, size_t) { return none(); }

Status Event::create(int, std::unique_ptr<Event>*) { return none(); }
Event::~Event() = default;
Status Stream::record(Event&) { return none(); }
Status Stream::wait(const Event&) { return none(); }
Status Stream::create(int, std::unique_ptr<Stream>*) { return none(); }
Stream::~Stream() = default;
Status Stream::reduce(const reduce::ReduceArgs&) { return none(); }
Status Stream::copy(void*, const void*, size_t) { return none(); }
Status Stream::record() { return none(); }
bool Stream::done(Status* error) {
  *error = none();
  return true;
}
Status Stream::synchronize() { return none(); }
Status Stream::notify(NoteQueue*, uint64_t) { return none(); }

Status ImportedMemory::open(int, uint64_t, const std::string&, std::unique_ptr<ImportedMemory>*) {
  return none();
}
ImportedMemory::~ImportedMemory() = default;

}  // namespace gsync::gpu
