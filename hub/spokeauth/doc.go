// Package spokeauth gives each cluster's agent its own NATS identity with
// the least privileges it needs, and takes it away again.
//
// It runs NATS decentralized authentication (operator, account and user
// JWTs signed with nkeys; see docs/design/spoke-identity.md for why):
//
//   - The hub owns one account, MERIDIAN, which holds the JetStream streams
//     and every Meridian connection. Its public key and its signing key are
//     kept in etcd under /meridian/spokeauth/ so that a restarted hub, or
//     another replica, issues and revokes with the same keys.
//   - Register issues a cluster a user JWT signed by the account's signing
//     key, whose permissions are natsbus.AgentPermissions(cluster): its own
//     subjects, its own durable consumer and its own inbox, nothing else.
//     The credential is returned once, as a .creds file; the hub keeps only
//     its public key. Register also creates the cluster's durable dispatch
//     consumer, because the agent may not.
//   - Revoke adds the user's public key to the account JWT's revocations,
//     re-signs the account JWT with the operator's (signing) key and pushes
//     it to the NATS servers over $SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE;
//     the servers disconnect the user at once and refuse it from then on.
//   - With the embedded NATS the hub also generates the operator and the
//     system account (kept in etcd too) and preloads the account JWTs. With
//     an external NATS the operator's signing key and a system-account
//     credential come from files; the hub pushes the account at start.
//
// This package must never log, return in an error or store a user's seed
// (only Register's result carries it, once), never issue a credential
// wider than AgentPermissions, and never decide anything about dispatch.
package spokeauth
