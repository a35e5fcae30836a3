// Package e2bwire holds E2B's wire types, shared by the client (provider/e2b) and the
// local server (provider/e2b/e2bserver): the control plane's JSON bodies (from E2B's
// OpenAPI spec, spec/openapi.yml in e2b-dev/infra), envd's process and filesystem
// messages in the protobuf JSON mapping, and the Connect protocol's framing and
// errors. It has no behaviour beyond encoding.
package e2bwire
