"""MCP adapter (both protocol generations, fallback tools, stdio and HTTP). Not built yet."""
