// Package bastion holds the end-to-end tests of a bastion session (model C,
// docs/bastion.md) on the local engine: the pair made by provider.CreateBastion,
// attacked from inside its agent. The session's blocks are its
// sub-packages: ingress, gitctl, link and controller.
package bastion
