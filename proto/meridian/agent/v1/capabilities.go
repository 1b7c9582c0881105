package agentv1

// Capabilities an agent lists in Advertisement.capabilities.
const (
	// CapabilityDispatchBatch: the agent reads HubMessage.batch, several
	// dispatches in one message.
	CapabilityDispatchBatch = "dispatch-batch"
)
