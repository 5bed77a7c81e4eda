/* SPDX-License-Identifier: MIT */
/*
 * A throwaway PKI for the TLS tests and benchmarks: certificate
 * authorities and the certificates they sign, EC P-256 keys, written as
 * PEM files. Never for a real deployment (no serial numbers tracked, no
 * revocation, keys in the clear).
 */
#ifndef DJINN_PKI_H
#define DJINN_PKI_H

#include <stdint.h>

struct pki_ca;

/*
 * struct pki_cert - what to issue
 * @cn:        the subject CN
 * @san:       subjectAltName in OpenSSL's config syntax
 *             ("IP:127.0.0.1,DNS:localhost"), or NULL
 * @not_before: seconds from now the certificate starts (may be negative)
 * @not_after:  seconds from now it ends (negative: expired)
 * @eku:        extendedKeyUsage ("serverAuth", "clientAuth"), or NULL
 */
/* @cn_len: @cn's bytes (0: up to its NUL), so that a test may put a NUL
 * inside it; @cn2: a second CN, or NULL */
struct pki_cert {
	const char *cn;
	const char *san;
	long not_before, not_after;
	const char *eku;
	size_t cn_len;
	const char *cn2;
};

/* A self-signed CA named @cn: NULL when OpenSSL fails. */
struct pki_ca *pki_ca_new(const char *cn);
void pki_ca_free(struct pki_ca *ca);
/* Write @ca's certificate (PEM) to @path: 0 or -1. */
int pki_ca_write(const struct pki_ca *ca, const char *path);
/* Issue @c under @ca (NULL: self-signed), its certificate to @cert_path
 * and its key to @key_path: 0 or -1. */
int pki_issue(const struct pki_ca *ca, const struct pki_cert *c,
	      const char *cert_path, const char *key_path);

#endif /* DJINN_PKI_H */
