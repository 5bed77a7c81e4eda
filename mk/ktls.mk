# Kernel TLS (lib/ktls.c) in the djinn.ko test guest (mk/kmod.mk), whose
# Debian kernel has the tls module that the build machine's kernel may
# lack: djinnd's tls: listener and libdjinn both hand their records to the
# kernel, bytes cross intact, an alert comes through
# (tests/kmod/guest/test_ktls.c). The guest loads tls.ko and the kernel's
# AES-GCM, copied from the kernel's modules when they are there.
KT_KTLS    := $(KT_DIR)/test_ktls
# tls.ko and the AES-GCM it asks the crypto API for, each after what it
# needs (modprobe --show-depends; none when kmod's modprobe is missing)
KT_TLS_KO  := $(shell for m in tls gf128mul ghash_generic ctr gcm cryptd \
		crypto_simd aesni_intel seqiv; do \
		/sbin/modprobe -S $(KMOD_RELEASE) --show-depends $$m 2>/dev/null; \
	done | awk '$$1 == "insmod" && !seen[$$2]++ { print $$2 }')
$(KT_KTLS): $(KT_DIR)/guest/test_ktls.o $(KT_DIR)/guest/kt.o \
		$(KT_DIR)/guest/djd.o $(LIBDJINN_A) $(COMMON_LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) -lcmocka $(KT_LIBS) \
		$(LIBS_LIBDJINN) $(COMMON_LIB) -lssl -lcrypto
KT_BINS += $(KT_KTLS)
$(KT_INITRD): $(KT_KTLS)
$(KT_INITRD): export KT_MODULES = $(KT_TLS_KO)

# djinn-bench tls in the guest's bench mode (make bench-kmod): kernel TLS
# figures where the build machine's kernel has no tls module.
KT_BINS += $(DJINN_BENCH)
$(KT_INITRD): $(DJINN_BENCH)
