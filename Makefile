# hakmem build.  `make` builds the libraries and the hakmem command, `make
# test` runs the suite, `make install` / `make uninstall` (PREFIX, DESTDIR).
#
# Build variants (each in its own directory under build/):
#   build/            release: libhakmem.so, libhakmem.a (malloc override on)
#   build/ubsan/      UBSan, override on
#   build/asan/       ASan, override off (tests drive the hak_* API)
#   build/tsan/       TSan, override off (tests drive the hak_* API)
#   build/stat2/      statistics level 2 (make STAT=2 builds the release so)
#   build/valgrind/   memcheck-aware (src/track.h), override on: make VALGRIND=1
#   build/asan-aware/ AddressSanitizer-aware (src/track.h), override on: make ASAN=1
#   build/secure/     secure (docs/secure.md): libhakmem-secure.so, libhakmem-secure.a: make SECURE=1

CC      ?= cc
CXX     ?= c++
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Werror -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT     := -O2 -g
STAT    ?= 1     # statistics level: 0 none, 1 counters, 2 also bytes requested
LIBFLAGS := -fPIC -fvisibility=hidden -fno-plt -ftls-model=initial-exec -fexceptions

# src/ holds the shared headers and a folder per layer (README.md, "How it
# works"): api, services, heap, slab and large, arena, base, os.
SRCS := $(wildcard src/*/*.c)

# The version, from include/hakmem.h; the shared library's soname carries the major.
VERSION := $(shell sed -n 's/^\#define HAKMEM_VERSION_[A-Z]* *//p' include/hakmem.h | paste -sd.)
MAJOR   := $(firstword $(subst ., ,$(VERSION)))
SONAME  := libhakmem.so.$(MAJOR)
HDRS := $(wildcard include/*.h src/*.h src/*/*.h)

B := build

.PHONY: all test clean bench-programs FORCE
all: $(B)/libhakmem.so $(B)/libhakmem.a $(B)/hakmem bench-programs $(if $(filter 1,$(VALGRIND)),valgrind) \
     $(if $(filter 1,$(ASAN)),$(B)/asan-aware/libhakmem.a) $(if $(filter 1,$(SECURE)),secure)

# --- one library variant: $(1)=dir $(2)=extra cflags $(3)=override(0/1) $(4)=stat level
# $(5)=library name (libhakmem). Its objects are linked into one,
# obj/hakmem.o (src/text.ld), which the static and shared libraries hold.
# The objects depend on $(1)/obj/flags, which holds the command line they
# are compiled with and changes only with it:
# `make STAT=2` after `make` (or CC=clang, OPT=...) rebuilds them.
define LIBVARIANT
$(1)/compile = $$(CC) $$(CSTD) $$(WARN) $$(OPT) $$(LIBFLAGS) $(2) -DHAK_OVERRIDE=$(3) -DHAK_STAT=$(strip $(or $(4),$(STAT))) -Iinclude -Isrc
$(1)/obj/%.o: src/%.c $(HDRS) $(1)/obj/flags
	@mkdir -p $$(@D)
	$$($(1)/compile) -c $$< -o $$@
$(1)/obj/flags: FORCE
	@mkdir -p $$(@D)
	@echo '$$($(1)/compile)' | cmp -s - $$@ || echo '$$($(1)/compile)' > $$@
$(1)/obj/hakmem.o: $(patsubst src/%.c,$(1)/obj/%.o,$(SRCS)) src/text.ld
	$$(CC) -r -nostdlib -Wl,-T,src/text.ld -o $$@ $$(filter %.o,$$^)
$(1)/$(or $(5),libhakmem).a: $(1)/obj/hakmem.o
	rm -f $$@ && ar rcs $$@ $$^
endef

$(eval $(call LIBVARIANT,$(B),,1))
$(eval $(call LIBVARIANT,$(B)/ubsan,-fsanitize=undefined -fno-sanitize-recover=undefined,1))
$(eval $(call LIBVARIANT,$(B)/asan,-fsanitize=address -fno-omit-frame-pointer,0))
$(eval $(call LIBVARIANT,$(B)/tsan,-fsanitize=thread,0))
$(eval $(call LIBVARIANT,$(B)/stat2,,1,2))
$(eval $(call LIBVARIANT,$(B)/valgrind,-DHAK_VALGRIND=1,1))
$(eval $(call LIBVARIANT,$(B)/asan-aware,-DHAK_ASAN=1,1))
$(eval $(call LIBVARIANT,$(B)/secure,-DHAK_SECURE=1,1,,libhakmem-secure))

# --- the shared library of a variant, $(1)=dir $(2)=name (libhakmem): the
# versioned file and the links that the soname and -lhakmem look for
# (libhakmem.so -> the soname -> the file; make install copies them as they are)
define SHAREDLIB
$(1)/$(2).so.$(VERSION): $(1)/obj/hakmem.o
	$$(CC) -shared -Wl,-soname,$(2).so.$(MAJOR) -Wl,-z,now -o $$@ $$^ -lpthread
$(1)/$(2).so.$(MAJOR): $(1)/$(2).so.$(VERSION)
	ln -sfn $$(notdir $$<) $$@
$(1)/$(2).so: $(1)/$(2).so.$(MAJOR)
	ln -sfn $$(notdir $$<) $$@
endef
$(eval $(call SHAREDLIB,$(B),libhakmem))
$(eval $(call SHAREDLIB,$(B)/valgrind,libhakmem))
$(eval $(call SHAREDLIB,$(B)/secure,libhakmem-secure))

# The secure build (docs/secure.md): LD_PRELOAD=build/secure/libhakmem-secure.so,
# or link build/secure/libhakmem-secure.a; make install SECURE=1 installs it too.
SECURE_LIBS := $(addprefix $(B)/secure/libhakmem-secure.,so.$(VERSION) so.$(MAJOR) so a)
.PHONY: secure
secure: $(SECURE_LIBS)

# memcheck sees hakmem's blocks as it sees glibc's (needs valgrind's
# headers, /usr/include/valgrind): valgrind ./program linked with
# build/valgrind/libhakmem.a, or LD_PRELOAD=build/valgrind/libhakmem.so.
.PHONY: valgrind
valgrind: $(B)/valgrind/libhakmem.so $(B)/valgrind/$(SONAME) $(B)/valgrind/libhakmem.a

# The command that runs a program with hakmem preloaded (tools/hakmem.c); it
# finds the library beside itself, in the LIBDIR make install compiles into
# the command it installs, or in ../lib, ../lib64, ../lib/<multiarch>.
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
LAUNCHER = $(CC) $(CSTD) $(WARN) $(OPT) -Iinclude -DHAKMEM_MULTIARCH='"$(MULTIARCH)"' $(1) -o $@ $< $(B)/libhakmem.a -lpthread
$(B)/hakmem: tools/hakmem.c include/hakmem.h $(B)/libhakmem.a $(B)/$(SONAME) $(B)/libhakmem.so
	$(call LAUNCHER)
.PHONY: $(B)/install/hakmem
$(B)/install/hakmem: tools/hakmem.c include/hakmem.h $(B)/libhakmem.a
	@mkdir -p $(@D)
	$(call LAUNCHER,-DHAKMEM_LIBDIR='"$(LIBDIR)"')

# --- install: make install [PREFIX=/usr/local] [DESTDIR=staging] (README.md, "Install")
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
DOCDIR     ?= $(PREFIX)/share/doc/hakmem
MANDIR     ?= $(PREFIX)/share/man
CMAKEDIR   := $(LIBDIR)/cmake/hakmem
PKG_SUBST  := sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@MAJOR@|$(MAJOR)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
                  -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g'

# Man pages: hakmem(1), and hakmem-options(7) with the options as the
# library lists them (hakmem --options).
MANS := $(B)/man/hakmem.1 $(B)/man/hakmem-options.7
$(B)/man:
	mkdir -p $@
$(B)/man/hakmem.1: pkg/man/hakmem.1 include/hakmem.h | $(B)/man
	sed -e 's|@VERSION@|$(VERSION)|g' $< >$@
$(B)/man/hakmem-options.7: pkg/man/hakmem-options.7.in pkg/man/options.awk $(B)/hakmem | $(B)/man
	env -u HAKMEM_OPTIONS $(B)/hakmem --options | awk -f pkg/man/options.awk >$@.list
	sed -e 's|@VERSION@|$(VERSION)|g' -e '/@OPTIONS@/{r $@.list' -e 'd;}' $< >$@ && rm $@.list
.PHONY: man
man: $(MANS)

# Debian packages (debian/; Debian's debhelper and dpkg-dev): libhakmem0,
# libhakmem-dev and hakmem, built from a copy of the sources in
# $(B)/deb/hakmem-$(VERSION), whose changelog names this version; the
# .deb files land in $(B)/deb.
DEB_SOURCES := Makefile README.md src include tools pkg docs debian
.PHONY: deb
deb:
	rm -rf $(B)/deb && mkdir -p $(B)/deb/hakmem-$(VERSION)
	cp -R $(DEB_SOURCES) $(B)/deb/hakmem-$(VERSION)/
	printf 'hakmem (%s) unstable; urgency=medium\n\n  * hakmem %s, built by make deb.\n\n -- %s  %s\n' \
	  '$(VERSION)' '$(VERSION)' "$$(sed -n 's/^Maintainer: //p' debian/control)" "$$(date -R)" \
	  >$(B)/deb/hakmem-$(VERSION)/debian/changelog
	cd $(B)/deb/hakmem-$(VERSION) && dpkg-buildpackage -us -uc -b
	ls $(B)/deb/*.deb

.PHONY: install uninstall
# The Valgrind-aware build goes to $(LIBDIR)/hakmem/valgrind (same names, so
# that LD_LIBRARY_PATH there serves a program linked with -lhakmem too),
# wherever valgrind's headers are to build it.
VG_LIBS := $(if $(wildcard /usr/include/valgrind/memcheck.h),$(addprefix $(B)/valgrind/libhakmem.,so.$(VERSION) so.$(MAJOR) so a))
VGDIR = $(LIBDIR)/hakmem/valgrind
install: $(B)/libhakmem.so.$(VERSION) $(B)/$(SONAME) $(B)/libhakmem.so $(B)/libhakmem.a $(B)/install/hakmem \
         $(if $(filter 1,$(SECURE)),$(SECURE_LIBS)) $(VG_LIBS) $(MANS)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(DOCDIR)
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	install -m 644 $(B)/man/hakmem.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(B)/man/hakmem-options.7 $(DESTDIR)$(MANDIR)/man7/
	install -m 755 $(B)/libhakmem.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	cp -P $(B)/$(SONAME) $(B)/libhakmem.so $(DESTDIR)$(LIBDIR)/
	install -m 644 $(B)/libhakmem.a $(DESTDIR)$(LIBDIR)/
	$(if $(filter 1,$(SECURE)),install -m 755 $(B)/secure/libhakmem-secure.so.$(VERSION) $(DESTDIR)$(LIBDIR)/)
	$(if $(filter 1,$(SECURE)),cp -P $(B)/secure/libhakmem-secure.so.$(MAJOR) $(B)/secure/libhakmem-secure.so $(DESTDIR)$(LIBDIR)/)
	$(if $(filter 1,$(SECURE)),install -m 644 $(B)/secure/libhakmem-secure.a $(DESTDIR)$(LIBDIR)/)
	$(if $(VG_LIBS),install -d $(DESTDIR)$(VGDIR) && install -m 755 $(B)/valgrind/libhakmem.so.$(VERSION) $(DESTDIR)$(VGDIR)/)
	$(if $(VG_LIBS),cp -P $(B)/valgrind/$(SONAME) $(B)/valgrind/libhakmem.so $(DESTDIR)$(VGDIR)/ && install -m 644 $(B)/valgrind/libhakmem.a $(DESTDIR)$(VGDIR)/)
	install -m 644 include/hakmem.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(B)/install/hakmem $(DESTDIR)$(BINDIR)/
	$(PKG_SUBST) pkg/hakmem.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/hakmem.pc
	$(PKG_SUBST) pkg/hakmemConfig.cmake.in >$(DESTDIR)$(CMAKEDIR)/hakmemConfig.cmake
	$(PKG_SUBST) pkg/hakmemConfigVersion.cmake.in >$(DESTDIR)$(CMAKEDIR)/hakmemConfigVersion.cmake
	install -m 644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libhakmem.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libhakmem.so \
	      $(DESTDIR)$(LIBDIR)/libhakmem.a $(DESTDIR)$(INCLUDEDIR)/hakmem.h $(DESTDIR)$(BINDIR)/hakmem \
	      $(addprefix $(DESTDIR)$(LIBDIR)/libhakmem-secure.,so.$(VERSION) so.$(MAJOR) so a) \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/hakmem.pc $(DESTDIR)$(MANDIR)/man1/hakmem.1 $(DESTDIR)$(MANDIR)/man7/hakmem-options.7
	rm -rf $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LIBDIR)/hakmem

# --- benchmarks (bench/README.md)
# `make bench` runs every workload under glibc, hakmem and the peer
# allocators found (BENCH_SCALE=1 BENCH_RUNS=5 by default, < 10 min on 2
# cores); `make bench-real` runs real programs (python3, perl, sort, xz,
# git, sqlite3, g++) the same way and checks their output against glibc's
# (BENCH_RUNS=3 by default); `make bench-classic` runs mimalloc-bench's
# classic programs (cfrac, espresso, barnes, ...) the same way, built from
# its sources at bench time; `make peers` installs the peers and
# python3-matplotlib, which draws the charts (bench/plot.py); `make
# bench-perf` counts instructions per operation; `make bench-classic-perf`
# counts each allocator's own instructions in the classic programs, per
# function (callgrind, smaller runs); `make bench-placement` times
# glibc-simple's loop at eight addresses; `make soak` runs the long
# soak (SOAK_MINUTES, default 5, balanced then lean); `make ab` compares
# HEAD~1 with HEAD (make ab REV_A=x REV_B=y, or bench/ab.sh REV_A REV_B
# [WORKLOAD...]).
BENCHES := $(patsubst bench/%.c,$(B)/bench/%,$(wildcard bench/*.c)) \
           $(patsubst bench/%.cc,$(B)/bench/%,$(wildcard bench/*.cc))
BENCH_TOOLS := $(B)/bench/tools/runone $(B)/bench/tools/libbump.so
bench-programs: $(BENCHES) $(BENCH_TOOLS)
$(B)/bench/%: bench/%.c $(wildcard bench/*.h) include/hakmem.h | $(B)/bench
	$(CC) $(CSTD) $(WARN) -O2 -g -o $@ $< -lpthread -lm
$(B)/bench/%: bench/%.cc | $(B)/bench
	$(CXX) -std=c++17 -Wall -Wextra -O2 -g -o $@ $< -lpthread
$(B)/bench/tools/%: bench/tools/%.c | $(B)/bench/tools
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -o $@ $<
# the bump allocator that bench-perf subtracts (bench/tools/bump.c)
$(B)/bench/tools/libbump.so: bench/tools/bump.c | $(B)/bench/tools
	$(CC) $(CSTD) $(WARN) -O2 -fPIC -shared -o $@ $<
$(B)/bench $(B)/bench/tools:
	mkdir -p $@

.PHONY: bench bench-real bench-classic bench-classic-perf bench-placement bench-threads bench-perf bench-smoke peers ab soak
bench: $(B)/libhakmem.so bench-programs
	python3 bench/run.py
bench-real: $(B)/libhakmem.so $(BENCH_TOOLS)
	python3 bench/real.py
	python3 bench/redis.py
bench-classic: $(B)/libhakmem.so $(BENCH_TOOLS)
	python3 bench/real.py --classic
bench-threads: $(B)/libhakmem.so bench-programs
	python3 bench/real.py --threads
bench-classic-perf: $(B)/libhakmem.so $(BENCH_TOOLS)
	python3 bench/classic_perf.py
bench-placement: $(B)/libhakmem.so $(BENCH_TOOLS)
	python3 bench/placement.py
bench-perf: $(B)/libhakmem.so bench-programs
	python3 bench/perf.py
soak: $(B)/libhakmem.so bench-programs
	python3 bench/soak.py
bench-smoke: $(B)/libhakmem.so bench-programs
	bench/smoke.sh
peers:
	$(if $(filter 0,$(shell id -u)),,sudo) sh -c 'apt-get update && apt-get install -y libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 python3-matplotlib'
ab: bench-programs
	bench/ab.sh $(or $(REV_A),HEAD~1) $(or $(REV_B),HEAD)

# --- tests
TEST_CFLAGS := $(CSTD) $(WARN) -O1 -g -Iinclude -Isrc -Itests
T := $(B)/test

# override tests: the standard names, statically linked with the release library
$(T)/%: tests/%.c tests/check.h $(HDRS) $(B)/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(B)/libhakmem.a -lpthread $(TEST_LIBS)
# the same tests linked dynamically against libhakmem.so
$(T)/dyn_%: tests/%.c tests/check.h $(HDRS) $(B)/libhakmem.so | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< -L$(B) -Wl,-rpath,$(abspath $(B)) -lhakmem -lpthread $(TEST_LIBS)
# the heap profile's test names its call sites with dladdr
PROF_TESTS := $(addprefix $(T)/,test_prof dyn_test_prof ubsan_test_prof stat2_test_prof)
$(PROF_TESTS): TEST_CFLAGS += -rdynamic
$(PROF_TESTS): TEST_LIBS := -lm -ldl
# UBSan build, override on
$(T)/ubsan_%: tests/%.c tests/check.h $(HDRS) $(B)/ubsan/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -fsanitize=undefined -fno-sanitize-recover=undefined -o $@ $< $(B)/ubsan/libhakmem.a -lpthread $(TEST_LIBS)
# ASan / TSan builds: override off, tests call the hak_* API (TEST_VIA_HAK)
$(T)/asan_%: tests/%.c tests/check.h $(HDRS) $(B)/asan/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -DTEST_VIA_HAK -fsanitize=address -fno-omit-frame-pointer -o $@ $< $(B)/asan/libhakmem.a -lpthread
$(T)/tsan_%: tests/%.c tests/check.h $(HDRS) $(B)/tsan/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -DTEST_VIA_HAK -fsanitize=thread -o $@ $< $(B)/tsan/libhakmem.a -lpthread
# the secure build (its own checks: test_secure; and the others with it)
$(T)/secure_%: tests/%.c tests/check.h $(HDRS) $(B)/secure/libhakmem-secure.a | $(T)
	$(CC) $(TEST_CFLAGS) -DHAK_SECURE=1 -o $@ $< $(B)/secure/libhakmem-secure.a -lpthread
# statistics level 2 (every allocation and free counted)
$(T)/stat2_%: tests/%.c tests/check.h $(HDRS) $(B)/stat2/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -DHAK_STAT=2 -o $@ $< $(B)/stat2/libhakmem.a -lpthread $(TEST_LIBS)
# the fuzzer: against hakmem (static, override on), and against glibc for the
# planted-bug shim that shows it can fail (tests/fuzz_plant.sh)
$(T)/fuzz: tests/fuzz.c tests/check.h $(HDRS) $(B)/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(B)/libhakmem.a -lpthread
$(T)/fuzz_glibc: tests/fuzz.c tests/check.h $(HDRS) | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< -lpthread
# memory checkers' view of a program (tests/valgrind.sh, tests/asan.sh):
# with the Valgrind-aware hakmem, the default one (which memcheck cannot
# see into) and glibc, and instrumented with the AddressSanitizer-aware one
# (linked whole: libasan has a malloc too)
$(T)/checker_valgrind: tests/checker_target.c $(B)/valgrind/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(B)/valgrind/libhakmem.a -lpthread
$(T)/valgrind_test_drain: tests/test_drain.c tests/check.h $(HDRS) $(B)/valgrind/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(B)/valgrind/libhakmem.a -lpthread
$(T)/checker_plain: tests/checker_target.c $(B)/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< $(B)/libhakmem.a -lpthread
$(T)/checker_glibc: tests/checker_target.c | $(T)
	$(CC) $(TEST_CFLAGS) -o $@ $< -lpthread
$(T)/checker_asan: tests/checker_target.c $(B)/asan-aware/libhakmem.a | $(T)
	$(CC) $(TEST_CFLAGS) -fsanitize=address -fno-omit-frame-pointer -o $@ $< \
	  -Wl,--whole-archive $(B)/asan-aware/libhakmem.a -Wl,--no-whole-archive -lpthread
$(T)/checker_asan_glibc: tests/checker_target.c | $(T)
	$(CC) $(TEST_CFLAGS) -fsanitize=address -fno-omit-frame-pointer -o $@ $< -lpthread
$(T)/fuzz_shim.so: tests/fuzz_shim.c | $(T)
	$(CC) $(CSTD) $(WARN) -O1 -g -fPIC -shared -o $@ $<
$(T)/%: tests/%.cc tests/check.h $(B)/libhakmem.so | $(T)
	$(CXX) -std=c++17 -O1 -g -Wall -Iinclude -o $@ $< -L$(B) -Wl,-rpath,$(abspath $(B)) -lhakmem -lpthread
$(T):
	mkdir -p $@

TESTS_C   := $(filter-out test_secure,$(patsubst tests/%.c,%,$(wildcard tests/test_*.c)))
# the tests of internals (tests/internals.h), run plain and without the arena (tests/run.sh)
INTERNAL_TESTS := test_classes test_superslab test_remote test_cache test_large test_purge test_heaps test_prof_internals
$(addprefix $(T)/,$(INTERNAL_TESTS)): tests/internals.h
SECURE_TESTS := test_secure test_api test_invalid test_stress test_churn test_fork test_large_race test_reclaim test_drain
TESTS_CXX := $(patsubst tests/%.cc,%,$(wildcard tests/test_*.cc))
SAN_TESTS := test_api test_stress test_churn test_reclaim test_drain
TEST_BINS := $(addprefix $(T)/,$(TESTS_C) $(TESTS_CXX)) \
             $(addprefix $(T)/dyn_,test_api test_stress test_prof) \
             $(addprefix $(T)/ubsan_,$(filter-out $(INTERNAL_TESTS),$(TESTS_C))) \
             $(addprefix $(T)/asan_,$(SAN_TESTS)) $(addprefix $(T)/tsan_,test_stress test_churn test_large_race test_release test_reclaim test_drain) \
             $(T)/stat2_test_stats $(T)/stat2_test_prof $(T)/fuzz $(T)/fuzz_glibc $(T)/fuzz_shim.so \
             $(addprefix $(T)/secure_,$(SECURE_TESTS) fuzz) $(B)/secure/libhakmem-secure.so \
             $(T)/checker_asan $(T)/checker_asan_glibc \
             $(if $(wildcard /usr/include/valgrind/memcheck.h),$(T)/checker_valgrind $(T)/valgrind_test_drain $(T)/checker_plain $(T)/checker_glibc \
               $(B)/valgrind/libhakmem.so $(B)/valgrind/$(SONAME))

test: all $(TEST_BINS)
	@INTERNAL_TESTS="$(INTERNAL_TESTS)" tests/run.sh

# make fuzz [FUZZ_OPS=1e8] [FUZZ_SEED=n] [FUZZ_THREADS=n] [FUZZ_PROFILE=lean]
# [FUZZ_ARENA=noarena]: every profile, with and without the arena, FUZZ_OPS
# operations each (default 1e7); a failure prints its seed.
.PHONY: fuzz
fuzz: $(T)/fuzz
	@tests/fuzz.sh $(or $(FUZZ_PROFILE),all) $(or $(FUZZ_ARENA),all)

# The file -> file arrows of the library's objects, its call loops and the
# arrows that run back up the layers (tools/structure.py).
.PHONY: structure
structure: $(B)/obj/hakmem.o
	python3 tools/structure.py $(B)/obj

clean:
	rm -rf $(B)
