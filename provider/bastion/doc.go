// Package bastion holds the end-to-end tests of a bastion session (model C,
// docs/bastion.md): the pair made by provider.CreateBastion on the local
// engine and over the local Modal and E2B servers, attacked from inside its
// agent. The session's blocks are its sub-packages: ingress, gitctl, link and
// controller.
package bastion
