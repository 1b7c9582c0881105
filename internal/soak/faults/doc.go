// Package faults draws a soak's fault schedule from a seed (Plan, pure)
// and applies it to a running topology (Injector): the leader hub
// SIGKILLed and restarted, paused past its lease and resumed, an etcd
// member and the etcd leader killed and restarted on their data, a NATS
// node killed and restarted, an agent paused for less and for more than
// the cluster timeout, and every hub restarted at once. Every step is
// logged with its time.
//
// This package must never judge the outcome (internal/soak/check does) and
// never leave a process paused or stopped when Run returns.
package faults
