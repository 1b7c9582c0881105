# A cluster is imported by its id (meridianctl clusters).
terraform import meridian_cluster.iad1 iad-1
