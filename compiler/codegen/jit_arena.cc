#include "compiler/codegen/jit_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace grove::compiler::codegen {
namespace {

int protection_of(unsigned flags) {
  int protection = PROT_NONE;
  if (flags & llvm::sys::Memory::MF_READ) protection |= PROT_READ;
  if (flags & llvm::sys::Memory::MF_WRITE) protection |= PROT_READ | PROT_WRITE;
  if (flags & llvm::sys::Memory::MF_EXEC) protection |= PROT_EXEC;
  return protection;
}

size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

size_t part_index(JitArena::Purpose purpose) {
  switch (purpose) {
    case JitArena::Purpose::Code:
      return 0;
    case JitArena::Purpose::ROData:
      return 1;
    case JitArena::Purpose::RWData:
      return 2;
  }
  return 2;
}

}  // namespace

JitArena::JitArena(size_t part_bytes) {
  long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) page_ = static_cast<size_t>(page);
  size_t part = round_up(part_bytes, page_);
  void* reserved =
      ::mmap(nullptr, 3 * part, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return;  // every request then falls back
  reservation_ = static_cast<char*>(reserved);
  reservation_bytes_ = 3 * part;
  for (size_t p = 0; p < 3; ++p) parts_[p] = Part{reservation_ + p * part, part, 0};
}

JitArena::~JitArena() {
  if (reservation_ != nullptr) ::munmap(reservation_, reservation_bytes_);
}

bool JitArena::owns(const void* address) const {
  const char* at = static_cast<const char*>(address);
  return reservation_ != nullptr && at >= reservation_ && at < reservation_ + reservation_bytes_;
}

llvm::sys::MemoryBlock JitArena::allocateMappedMemory(Purpose purpose, size_t bytes,
                                                      const llvm::sys::MemoryBlock* near,
                                                      unsigned flags, std::error_code& error) {
  error = std::error_code();
  if (bytes == 0) return llvm::sys::MemoryBlock();
  size_t size = round_up(bytes, page_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Part& part = parts_[part_index(purpose)];
    if (part.base != nullptr && part.used + size <= part.size) {
      char* start = part.base + part.used;
      if (::mprotect(start, size, protection_of(flags)) != 0) {
        error = std::error_code(errno, std::generic_category());
        return llvm::sys::MemoryBlock();
      }
      part.used += size;
      return llvm::sys::MemoryBlock(start, size);
    }
  }
  return llvm::sys::Memory::allocateMappedMemory(bytes, near, flags, error);
}

std::error_code JitArena::protectMappedMemory(const llvm::sys::MemoryBlock& block, unsigned flags) {
  if (!owns(block.base())) return llvm::sys::Memory::protectMappedMemory(block, flags);
  if (block.allocatedSize() == 0) return std::error_code();
  auto start = reinterpret_cast<uintptr_t>(block.base()) / page_ * page_;
  uintptr_t end =
      round_up(reinterpret_cast<uintptr_t>(block.base()) + block.allocatedSize(), page_);
  if (::mprotect(reinterpret_cast<void*>(start), end - start, protection_of(flags)) != 0) {
    return std::error_code(errno, std::generic_category());
  }
  return std::error_code();
}

std::error_code JitArena::releaseMappedMemory(llvm::sys::MemoryBlock& block) {
  if (!owns(block.base())) return llvm::sys::Memory::releaseMappedMemory(block);
  // The pages go back to no access and their contents are dropped; the
  // address range stays reserved (the arena only ever grows).
  if (block.allocatedSize() > 0) {
    ::mprotect(block.base(), block.allocatedSize(), PROT_NONE);
    ::madvise(block.base(), block.allocatedSize(), MADV_DONTNEED);
  }
  block = llvm::sys::MemoryBlock();
  return std::error_code();
}

}  // namespace grove::compiler::codegen
