data "meridian_queue" "vision" {
  path = "acme/vision"
}

output "vision_h100_usage" {
  value = data.meridian_queue.vision.usage["nvidia-h100-80gb"].usage
}
