// A chat model that plays a script: each turn pops the next AIMessage (tool calls included), or
// calls a function of the conversation so far. No network, no key, no model.
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";

export class ScriptedChatModel extends BaseChatModel {
  constructor(script) {
    super({});
    this.script = script;
    this.turn = 0;
  }

  _llmType() {
    return "scripted";
  }

  bindTools() {
    return this;
  }

  async _generate(messages) {
    const step = this.script[this.turn++];
    if (!step) throw new Error(`the script has no turn ${this.turn}`);
    const message = typeof step === "function" ? step(messages) : step;
    return { generations: [{ text: "", message }] };
  }
}

/** An AIMessage calling one tool. */
export const call = (id, name, args) => new AIMessage({ content: "", tool_calls: [{ id, name, args }] });

/** A tool message's content as text (read_file answers with content blocks). */
export const text = (content) => (typeof content === "string" ? content : content.map((block) => block.text ?? "").join(""));
