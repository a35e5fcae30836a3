package rules

// Trust of a sandbox with secrets (engine.Spec.Secrets): the egress proxy terminates
// TLS to the secrets' hosts with a certificate of the sandbox's own authority, which
// the sandbox's TLS clients must trust. The local engine binds the system bundle
// TrustBundleFile with the authority appended. An engine adapter of a remote platform
// (its file calls run as the sandbox's user, who may not write /etc/ssl/certs: E2B's
// "user") writes the authority to TrustUserCAFile and the system bundle with it to
// TrustUserBundleFile, adds it to the system's files where it may, and sets TrustEnv in
// the sandbox's environment, which names the user's files so that it holds either way.
const (
	// TrustCAFile holds the certificate of the sandbox's egress authority alone.
	TrustCAFile = "/etc/ssl/certs/sandbox-egress-ca.pem"
	// TrustBundleFile is the system's bundle of roots (Debian's), with the
	// authority appended.
	TrustBundleFile = "/etc/ssl/certs/ca-certificates.crt"
	// TrustUserDir holds the user-writable copies of the trust.
	TrustUserDir = HomeDir + "/.config/sandbox-egress"
	// TrustUserCAFile is the authority alone, in TrustUserDir.
	TrustUserCAFile = TrustUserDir + "/ca.pem"
	// TrustUserBundleFile is the system bundle with the authority appended, in
	// TrustUserDir.
	TrustUserBundleFile = TrustUserDir + "/ca-certificates.crt"

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
// trust, in the user-writable copies: the bundle where a variable replaces the roots,
// the authority alone where it adds to them.
func TrustEnv() []string { return TrustEnvAt(TrustUserBundleFile, TrustUserCAFile) }

// TrustEnvAt is KEY=VALUE for each variable that points a TLS client at the sandbox's
// trust, which the files bundle (the system's roots with the authority) and ca (the
// authority alone, or also a bundle) hold: the programs that do not read the system's
// roots (or read them only at build time) find it through these variables.
func TrustEnvAt(bundle, ca string) []string {
	return []string{
		EnvSSLCertFile + "=" + bundle,
		EnvRequestsCABundle + "=" + bundle,
		EnvNodeExtraCACerts + "=" + ca,
		EnvDenoCert + "=" + ca,
	}
}

// EnvNodeUseEnvProxy=1 makes Node's built-in fetch (Node ≥ 22.21 or 24) and, from
// Node 24.5, its http and https modules use HTTP_PROXY, HTTPS_PROXY and NO_PROXY,
// which they ignore otherwise; older Nodes ignore the variable. Set with the proxy
// variables of a sandbox with egress, so Node's fetch reaches a secret's host through
// the proxy that adds the value.
const EnvNodeUseEnvProxy = "NODE_USE_ENV_PROXY"
