package rules

// Trust of a sandbox with secrets (engine.Spec.Secrets): the egress proxy terminates
// TLS to the secrets' hosts with a certificate of the sandbox's own authority, which
// the sandbox's TLS clients must trust. The engine writes the authority's certificate
// to TrustCAFile, appends it to the system bundle TrustBundleFile, and sets
// TrustEnv in every command's environment.
const (
	// TrustCAFile holds the certificate of the sandbox's egress authority alone.
	TrustCAFile = "/etc/ssl/certs/sandbox-egress-ca.pem"
	// TrustBundleFile is the system's bundle of roots (Debian's), with the
	// authority appended.
	TrustBundleFile = "/etc/ssl/certs/ca-certificates.crt"

	// EnvSSLCertFile is OpenSSL's (curl, git, Python's ssl, Go's) bundle.
	EnvSSLCertFile = "SSL_CERT_FILE"
	// EnvNodeExtraCACerts adds certificates to Node's roots.
	EnvNodeExtraCACerts = "NODE_EXTRA_CA_CERTS"
	// EnvDenoCert adds certificates to Deno's roots.
	EnvDenoCert = "DENO_CERT"
	// EnvRequestsCABundle is Python requests' bundle.
	EnvRequestsCABundle = "REQUESTS_CA_BUNDLE"
)

// TrustEnv is KEY=VALUE for each variable that points a TLS client at the sandbox's
// trust: the bundle where a variable replaces the roots, the authority alone where it
// adds to them.
func TrustEnv() []string {
	return []string{
		EnvSSLCertFile + "=" + TrustBundleFile,
		EnvRequestsCABundle + "=" + TrustBundleFile,
		EnvNodeExtraCACerts + "=" + TrustCAFile,
		EnvDenoCert + "=" + TrustCAFile,
	}
}
