-- The tools of the user's MCP servers that they chose "Always allow this tool" for: a call to one
-- runs without asking. A server is known by its name in the settings and the program it runs
-- (`program`: its command and arguments as JSON), so a name pointed at another program asks again.
CREATE TABLE allowed_tools (
    server      TEXT    NOT NULL,
    program     TEXT    NOT NULL,
    tool        TEXT    NOT NULL,
    allowed_at  INTEGER NOT NULL,
    PRIMARY KEY (server, program, tool)
);
