# An access list is imported by its queue's path.
terraform import meridian_queue_access.vision acme/vision
