-- The tools of the user's MCP servers that they chose "Always allow this tool" for: a call to one
-- runs without asking. A server is known by its name in the settings.
CREATE TABLE allowed_tools (
    server      TEXT    NOT NULL,
    tool        TEXT    NOT NULL,
    allowed_at  INTEGER NOT NULL,
    PRIMARY KEY (server, tool)
);
