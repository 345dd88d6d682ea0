// The STeP extension: the `step` language and a client that starts `stepc lsp`.
"use strict";

const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function settings() {
  const config = vscode.workspace.getConfiguration("stepc");
  return {
    stepc: {
      defines: config.get("defines"),
      hw: config.get("hw"),
      inlayHints: config.get("inlayHints"),
    },
  };
}

function start() {
  const [command, ...args] = vscode.workspace.getConfiguration("stepc").get("command");
  client = new LanguageClient(
    "stepc",
    "STeP (stepc lsp)",
    { command, args },
    {
      documentSelector: [{ scheme: "file", language: "step" }, { scheme: "untitled", language: "step" }],
      initializationOptions: settings(),
      synchronize: { configurationSection: "stepc" },
    },
  );
  return client.start();
}

async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand("stepc.restartServer", async () => {
      if (client) {
        await client.stop();
      }
      await start();
    }),
    { dispose: () => client && client.stop() },
  );
  await start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
