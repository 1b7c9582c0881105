# A token is imported by its public id (meridianctl token list); its
# secret cannot be imported and stays null.
terraform import meridian_api_token.vision_ci 5f3k2m7q9x1c4v8b
