package agentv1

// Capabilities an agent lists in Advertisement.capabilities, and a hub in
// RegisterAck.capabilities.
const (
	// CapabilityDispatchBatch: the agent reads HubMessage.batch, several
	// dispatches in one message.
	CapabilityDispatchBatch = "dispatch-batch"
	// CapabilityEventBatch: the hub reads EventBatch, several events in
	// one message.
	CapabilityEventBatch = "event-batch"
)

// EventBatchMsgIDPrefix starts the Nats-Msg-Id of an EventBatch on an
// events subject; a single DispatchEvent's id (its event_id) never does.
const EventBatchMsgIDPrefix = "batch:"
