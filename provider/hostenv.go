package provider

// The host side's environment: the platform settings and credentials the providers
// and sandboxctl read on the host, spelled here once (the sandbox's own variables are
// in package rules). HostEnvNames lists them for the test that keeps them from being
// spelled again.
const (
	EnvSandboxImageVersion        = "SANDBOX_IMAGE_VERSION"
	EnvSandboxTimeoutSeconds      = "SANDBOX_TIMEOUT_SECONDS"
	EnvSandboxMCPBinaryURL        = "SANDBOX_MCP_BINARY_URL"
	EnvProliferateBinaryURL       = "PROLIFERATE_BINARY_URL"
	EnvGitPullOnRestore           = "SANDBOX_GIT_PULL_ON_RESTORE"
	EnvGitPullCadenceSeconds      = "SANDBOX_GIT_PULL_CADENCE_SECONDS"
	EnvDefaultProvider            = "DEFAULT_SANDBOX_PROVIDER"
	EnvLLMProxyURL                = "LLM_PROXY_URL"
	EnvLLMProxyPublicURL          = "LLM_PROXY_PUBLIC_URL"
	EnvModalTokenID               = "MODAL_TOKEN_ID"
	EnvModalTokenSecret           = "MODAL_TOKEN_SECRET"
	EnvModalServerURL             = "MODAL_SERVER_URL"
	EnvModalTunnelCA              = "MODAL_TUNNEL_CA"
	EnvModalAppName               = "MODAL_APP_NAME"
	EnvModalAppSuffix             = "MODAL_APP_SUFFIX"
	EnvModalBaseSnapshotID        = "MODAL_BASE_SNAPSHOT_ID"
	EnvE2BAPIKey                  = "E2B_API_KEY"
	EnvE2BDomain                  = "E2B_DOMAIN"
	EnvE2BAPIURL                  = "E2B_API_URL"
	EnvE2BSandboxURL              = "E2B_SANDBOX_URL"
	EnvE2BTemplate                = "E2B_TEMPLATE"
	EnvE2BLocalTunnels            = "E2B_LOCAL_TUNNELS"
	EnvSandboxctlDataDir          = "SANDBOXCTL_DATA_DIR"
	EnvSandboxctlSandboxMCP       = "SANDBOXCTL_SANDBOX_MCP"
	EnvSandboxctlProliferate      = "SANDBOXCTL_PROLIFERATE"
	EnvSandboxctlModalSkipRunStep = "SANDBOXCTL_MODAL_SKIP_RUN"
	// EnvEgressGateway is the egress gateway's proxy (sandboxctl gateway) as the
	// sandboxes of Modal or E2B reach it, host:port; with the two below it lets
	// those engines carry Spec.Secrets.
	EnvEgressGateway = "SANDBOX_EGRESS_GATEWAY"
	// EnvEgressGatewayAdminURL is the gateway's registration API (its --admin), the
	// host side's only.
	EnvEgressGatewayAdminURL = "SANDBOX_EGRESS_GATEWAY_ADMIN_URL"
	// EnvEgressGatewayAdminToken is the registration API's bearer token.
	EnvEgressGatewayAdminToken = "SANDBOX_EGRESS_GATEWAY_ADMIN_TOKEN"
)

// HostEnvNames lists every name above.
func HostEnvNames() []string {
	return []string{EnvSandboxImageVersion, EnvSandboxTimeoutSeconds, EnvSandboxMCPBinaryURL,
		EnvProliferateBinaryURL, EnvGitPullOnRestore, EnvGitPullCadenceSeconds, EnvDefaultProvider,
		EnvLLMProxyURL, EnvLLMProxyPublicURL, EnvModalTokenID, EnvModalTokenSecret, EnvModalServerURL,
		EnvModalTunnelCA, EnvModalAppName, EnvModalAppSuffix, EnvModalBaseSnapshotID, EnvE2BAPIKey,
		EnvE2BDomain, EnvE2BAPIURL, EnvE2BSandboxURL, EnvE2BTemplate, EnvE2BLocalTunnels,
		EnvSandboxctlDataDir, EnvSandboxctlSandboxMCP, EnvSandboxctlProliferate,
		EnvSandboxctlModalSkipRunStep, EnvEgressGateway, EnvEgressGatewayAdminURL, EnvEgressGatewayAdminToken}
}
