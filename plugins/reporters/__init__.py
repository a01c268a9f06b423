"""Built-in reporters: json, markdown, junit and html."""
