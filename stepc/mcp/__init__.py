"""The MCP server (`stepc mcp`): stepc's checker, analyzer, simulator and tuner as tools an
agent calls, with the language and operator references as resources. A front end like the
CLI: it enters stepc through the API."""
