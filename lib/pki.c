// SPDX-License-Identifier: MIT
/*
 * A throwaway PKI for tests and benchmarks (pki.h).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "pki.h"

struct pki_ca {
	EVP_PKEY *key;
	X509 *cert;
};

static EVP_PKEY *keygen(void)
{
	return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/* One extension of OpenSSL's config syntax, issued by @issuer. */
static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *e;
	int ok;

	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!e)
		return 0;
	ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok;
}

/* A certificate of @key for @c, signed by @ca_key as @ca (NULL: by
 * itself); @is_ca: basicConstraints CA:TRUE. */
static X509 *make(const struct pki_cert *c, EVP_PKEY *key, X509 *ca,
		  EVP_PKEY *ca_key, int is_ca)
{
	X509 *x = X509_new();
	X509_NAME *name;
	uint64_t serial;

	if (!x || RAND_bytes((unsigned char *)&serial, sizeof(serial)) != 1)
		goto fail;
	serial >>= 1; /* positive */
	if (!X509_set_version(x, 2) ||
	    !ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), serial) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), c->not_before) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), c->not_after) ||
	    !X509_set_pubkey(x, key))
		goto fail;
	name = X509_get_subject_name(x);
	if (!X509_NAME_add_entry_by_txt(
		    name, "CN", MBSTRING_UTF8, (const unsigned char *)c->cn,
		    c->cn_len ? (int)c->cn_len : -1, -1, 0) ||
	    (c->cn2 && !X509_NAME_add_entry_by_txt(
			       name, "CN", MBSTRING_UTF8,
			       (const unsigned char *)c->cn2, -1, -1, 0)) ||
	    !X509_set_issuer_name(x, ca ? X509_get_subject_name(ca) : name))
		goto fail;
	if (!add_ext(x, ca, NID_basic_constraints,
		     is_ca ? "critical,CA:TRUE" : "CA:FALSE") ||
	    !add_ext(x, ca, NID_subject_key_identifier, "hash") ||
	    (ca &&
	     !add_ext(x, ca, NID_authority_key_identifier, "keyid:always")) ||
	    (is_ca &&
	     !add_ext(x, ca, NID_key_usage, "critical,keyCertSign,cRLSign")) ||
	    (c->san && !add_ext(x, ca, NID_subject_alt_name, c->san)) ||
	    (c->eku && !add_ext(x, ca, NID_ext_key_usage, c->eku)))
		goto fail;
	if (!X509_sign(x, ca_key ? ca_key : key, EVP_sha256()))
		goto fail;
	return x;
fail:
	X509_free(x);
	return NULL;
}

struct pki_ca *pki_ca_new(const char *cn)
{
	const struct pki_cert c = { .cn = cn,
				    .not_before = -3600,
				    .not_after = 30L * 86400 };
	struct pki_ca *ca = calloc(1, sizeof(*ca));

	if (!ca)
		return NULL;
	ca->key = keygen();
	if (ca->key)
		ca->cert = make(&c, ca->key, NULL, NULL, 1);
	if (!ca->cert) {
		pki_ca_free(ca);
		return NULL;
	}
	return ca;
}

void pki_ca_free(struct pki_ca *ca)
{
	if (!ca)
		return;
	X509_free(ca->cert);
	EVP_PKEY_free(ca->key);
	free(ca);
}

/* @x, or else @key (mode 0600), as PEM into @path. */
static int write_pem(const char *path, X509 *x, EVP_PKEY *key)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		      x ? 0644 : 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	int ok;

	if (!f) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	ok = x ? PEM_write_X509(f, x) :
		 PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
	return fclose(f) || !ok ? -1 : 0;
}

int pki_ca_write(const struct pki_ca *ca, const char *path)
{
	return write_pem(path, ca->cert, NULL);
}

int pki_issue(const struct pki_ca *ca, const struct pki_cert *c,
	      const char *cert_path, const char *key_path)
{
	EVP_PKEY *key = keygen();
	X509 *x = key ? make(c, key, ca ? ca->cert : NULL, ca ? ca->key : NULL,
			     0) :
			NULL;
	int ret = x && !write_pem(cert_path, x, NULL) &&
				  !write_pem(key_path, NULL, key) ?
			  0 :
			  -1;

	X509_free(x);
	EVP_PKEY_free(key);
	return ret;
}
