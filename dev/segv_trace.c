/* LD_PRELOAD diagnostic: on SIGSEGV print the faulting address, the instruction's library and
 * offset, and a backtrace as (library, offset, nearest symbol) for addr2line. Used by
 * dev/probe_throw.sh for the Python-on-GPU crash (issue 6). Run the process without Python's
 * faulthandler (pytest -p no:faulthandler), which would take the signal instead.
 *   gcc -shared -fPIC -O1 -o segv_trace.so dev/segv_trace.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <ucontext.h>
#include <unistd.h>

/* stderr as it was when this library loaded: pytest later points fd 2 at its capture file,
 * which nobody reads once the process has died. */
static int g_err = 2;

static void say(void* addr, const char* what) {
  Dl_info info;
  char line[768];
  int n;
  if (dladdr(addr, &info) && info.dli_fname)
    n = snprintf(line, sizeof line, "  %s %p %s +0x%lx %s\n", what, addr, info.dli_fname,
                 (unsigned long)((char*)addr - (char*)info.dli_fbase),
                 info.dli_sname ? info.dli_sname : "?");
  else
    n = snprintf(line, sizeof line, "  %s %p (no library)\n", what, addr);
  if (n > 0) (void)!write(g_err, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static void on_segv(int sig, siginfo_t* si, void* context) {
  const ucontext_t* uc = (const ucontext_t*)context;
  char line[128];
  int n = snprintf(line, sizeof line, "segv_trace: signal %d at address %p\n", sig, si->si_addr);
  (void)!write(g_err, line, (size_t)n);
  say((void*)uc->uc_mcontext.gregs[REG_RIP], "ip");
  void* frames[48];
  int k = backtrace(frames, 48);
  for (int i = 0; i < k; ++i) say(frames[i], "frame");
  _exit(139);
}

/* Installs the handler (again): callable late, e.g. before each test from dev/segv_plugin.py,
 * in case something loaded after this library replaced it. Says once whose handler it replaced. */
void segv_trace_install(void) {
  static char stack[1 << 16];
  static int told = 0;
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa = {0}, old;
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, &old);
  void* prev = (old.sa_flags & SA_SIGINFO) ? (void*)old.sa_sigaction : (void*)old.sa_handler;
  if (prev != (void*)on_segv && prev != (void*)SIG_DFL && !told) {
    told = 1;
    say(prev, "segv_trace: replaced a SIGSEGV handler at");
  }
}

__attribute__((constructor)) static void install_at_load(void) {
  const int fd = dup(2);
  if (fd >= 0) g_err = fd;
  segv_trace_install();
}
