# A queue is imported by its path.
terraform import meridian_queue.vision acme/vision
