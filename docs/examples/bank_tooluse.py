"""A tool-use environment: a customer asks for a balance check, a transfer
and an invoice payment, one instruction at a time. Example for
docs/environment-contract.md."""

import json

from spade_env import ToolUseEnv

ACCOUNT = {"type": "string", "enum": ["checking", "savings"]}


class BankAssistant(ToolUseEnv):
    name = "bank_transfer_and_invoice"
    skill = "planning"
    max_turns = 12
    reward_range = (0.0, 1.0)

    tools = [
        {
            "name": "get_balance",
            "description": "Return the balance of one account, in dollars.",
            "parameters": {"type": "object", "properties": {"account": ACCOUNT}, "required": ["account"]},
        },
        {
            "name": "transfer",
            "description": "Move money between the customer's own accounts.",
            "parameters": {
                "type": "object",
                "properties": {"from_account": ACCOUNT, "to_account": ACCOUNT, "amount": {"type": "number"}},
                "required": ["from_account", "to_account", "amount"],
            },
        },
        {
            "name": "list_invoices",
            "description": "List open invoices with id, payee and amount.",
            "parameters": {"type": "object", "properties": {}},
        },
        {
            "name": "pay_invoice",
            "description": "Pay an open invoice in full from one account.",
            "parameters": {
                "type": "object",
                "properties": {"invoice_id": {"type": "string"}, "account": ACCOUNT},
                "required": ["invoice_id", "account"],
            },
        },
    ]

    def initial_state(self):
        savings = self.rng.randrange(800, 2000, 50)
        checking = self.rng.randrange(20, 120, 5)
        invoices = [
            {"id": f"INV-{self.rng.randint(1000, 9999)}", "payee": payee, "amount": self.rng.randrange(150, 400, 5), "paid": False}
            for payee in ("Acme Utilities", "City Water")
        ]
        self.move = self.rng.randrange(300, 600, 50)
        self.target = self.rng.choice(invoices)
        return {
            "accounts": {"checking": checking, "savings": savings},
            "invoices": invoices,
            "checked": [],
            "start": {"checking": checking, "savings": savings},
        }

    def instructions(self):
        start, move, inv = self.state["start"], self.move, self.target
        return [
            ("What is the balance of my savings account?", lambda s: "savings" in s["checked"]),
            (
                f"Move ${move} from savings to checking.",
                lambda s: s["accounts"]["savings"] == start["savings"] - move
                and s["accounts"]["checking"] >= start["checking"] + move - inv["amount"],
            ),
            (
                f"Pay my {inv['payee']} invoice from checking.",
                lambda s: any(i["id"] == inv["id"] and i["paid"] for i in s["invoices"])
                and s["accounts"]["checking"] == start["checking"] + move - inv["amount"],
            ),
        ]

    def solution(self):
        call = lambda name, **args: json.dumps({"name": name, "arguments": args})
        return [
            call("get_balance", account="savings"),
            call("transfer", from_account="savings", to_account="checking", amount=self.move),
            call("list_invoices"),
            call("pay_invoice", invoice_id=self.target["id"], account="checking"),
        ]

    def tool_get_balance(self, account):
        self.state["checked"].append(account)
        return f"{account} balance: ${self.state['accounts'][account]}"

    def tool_transfer(self, from_account, to_account, amount):
        acc = self.state["accounts"]
        if from_account == to_account:
            return "Error: choose two different accounts."
        if amount <= 0:
            return "Error: the amount must be positive."
        if acc[from_account] < amount:
            return f"Error: insufficient funds in {from_account} (${acc[from_account]})."
        acc[from_account] -= amount
        acc[to_account] += amount
        return f"Moved ${amount} from {from_account} to {to_account}."

    def tool_list_invoices(self):
        open_ = [f"{i['id']} {i['payee']} ${i['amount']}" for i in self.state["invoices"] if not i["paid"]]
        return "Open invoices: " + ("; ".join(open_) if open_ else "none")

    def tool_pay_invoice(self, invoice_id, account):
        inv = next((i for i in self.state["invoices"] if i["id"] == invoice_id), None)
        if inv is None:
            return f"Error: no invoice {invoice_id}."
        if inv["paid"]:
            return f"Error: {invoice_id} is already paid."
        acc = self.state["accounts"]
        if acc[account] < inv["amount"]:
            return f"Error: insufficient funds in {account} (${acc[account]}) for ${inv['amount']}."
        acc[account] -= inv["amount"]
        inv["paid"] = True
        return f"Paid {invoice_id} (${inv['amount']}) from {account}."
