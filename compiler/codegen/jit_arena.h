// JitArena: where the host JIT puts the code and data of the kernels it
// compiles (a private header of //compiler/codegen: it names LLVM types).
//
// Note [JIT memory in arenas]
// LLVM's default memory mapper maps fresh pages for each kernel module's code,
// read-only data and writable data: about three memory mappings per host
// kernel, never unmapped (the JIT lives as long as the process and kernels
// stay cached). Linux caps a process at vm.max_map_count mappings (65530 by
// default), and a process that had compiled some 20,000 distinct host kernels
// (the fuzzer, after about five minutes) reached it: LLVM then aborted the
// whole process ("Unable to allocate section memory!"). JitArena reserves one
// address range up front (no access, no memory committed) in three parts, one
// per purpose, and hands out consecutive pages from the part of a request's
// purpose. The finished pages of one part all carry the same protection (code
// read+execute, read-only data read, writable data read+write), so the kernel
// merges them into one mapping per part, however many kernels there are. The
// parts lie within 1.5 GiB of each other, inside the +-2 GiB reach of the
// PC-relative references between one module's sections. A full part falls
// back to LLVM's own mapping, as before.
#pragma once

#include <cstddef>
#include <mutex>
#include <system_error>

#include "llvm/ExecutionEngine/SectionMemoryManager.h"

namespace grove::compiler::codegen {

class JitArena : public llvm::SectionMemoryManager::MemoryMapper {
 public:
  using Purpose = llvm::SectionMemoryManager::AllocationPurpose;

  // Reserves 3 * `part_bytes` of address space (rounded up to whole pages).
  explicit JitArena(size_t part_bytes = size_t{512} << 20);
  ~JitArena() override;
  JitArena(const JitArena&) = delete;
  JitArena& operator=(const JitArena&) = delete;

  llvm::sys::MemoryBlock allocateMappedMemory(Purpose purpose, size_t bytes,
                                              const llvm::sys::MemoryBlock* near, unsigned flags,
                                              std::error_code& error) override;
  std::error_code protectMappedMemory(const llvm::sys::MemoryBlock& block, unsigned flags) override;
  std::error_code releaseMappedMemory(llvm::sys::MemoryBlock& block) override;

 private:
  struct Part {
    char* base = nullptr;
    size_t size = 0;
    size_t used = 0;
  };
  bool owns(const void* address) const;

  std::mutex mutex_;
  char* reservation_ = nullptr;
  size_t reservation_bytes_ = 0;
  size_t page_ = 4096;
  Part parts_[3];
};

}  // namespace grove::compiler::codegen
