/* What the static CPU libccl.a of the pip wheel oneccl-cpu-devel (built with Intel's compiler
   against an older glibc) calls but GCC and glibc >= 2.33 do not provide: Intel's memcpy and
   memset entry points, glibc's old __xstat (only a compatibility symbol since 2.33), and the
   function pointers of Intel's ITT profiling hooks, which left null turn the hooks off. Linked
   into spattn only with that library (src/comm/CMakeLists.txt). */
#include <string.h>
#include <sys/stat.h>

void* _intel_fast_memcpy(void* destination, const void* source, size_t bytes) {
  return memcpy(destination, source, bytes);
}
void* _intel_fast_memset(void* destination, int value, size_t bytes) { return memset(destination, value, bytes); }
int __xstat(int version, const char* path, struct stat* status) {
  (void)version;
  return stat(path, status);
}

void* __itt_domain_create_ptr__3_0 = 0;
void* __itt_event_create_ptr__3_0 = 0;
void* __itt_event_end_ptr__3_0 = 0;
void* __itt_event_start_ptr__3_0 = 0;
void* __itt_metadata_add_ptr__3_0 = 0;
void* __itt_string_handle_create_ptr__3_0 = 0;
void* __itt_task_begin_ptr__3_0 = 0;
void* __itt_task_end_ptr__3_0 = 0;
void* __itt_thread_set_name_ptr__3_0 = 0;
